//go:build linux

package hostpath

import (
	"errors"
	"io/fs"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// Building a new volume's data: empty, or copied from a snapshot or another
// volume.

// volumeData is what a new volume is made of: a copy of the data at path,
// or, with path "", nothing. A volume without data gets the default
// permission bits, or, when setMode is set (an empty snapshot's), mode and
// the owner uid and gid.
type volumeData struct {
	path     string
	mode     fs.FileMode
	uid, gid uint32
	setMode  bool
}

// snapshotData is what a volume restored from snap is made of.
func (d *Driver) snapshotData(snap state.Snapshot) volumeData {
	if snap.Empty {
		return volumeData{mode: snap.Mode, uid: snap.UID, gid: snap.GID, setMode: true}
	}
	return volumeData{path: d.snapshotPath(snap.ID)}
}

// sourceMissing is the error for a content source this node does not hold: NotFound, or, for a
// placed request, ResourceExhausted: the source may be on another node (each node's driver
// knows only its own), and the provisioner answers that code by asking the scheduler for
// another node.
func (d *Driver) sourceMissing(spec volumeSpec, kind, id string) error {
	if spec.placed {
		return status.Errorf(codes.ResourceExhausted, "%s %s is not on node %s", kind, id, d.opts.NodeID)
	}
	return status.Errorf(codes.NotFound, "%s %s not found", kind, id)
}

// volumeSource resolves a content source to what the new volume is made
// of and checks that the source fits the request.
func (d *Driver) volumeSource(spec volumeSpec) (volumeData, error) {
	var data volumeData
	var size int64
	var accessType state.AccessType
	switch {
	case spec.sourceSnap != "":
		snap, ok := d.snapshots.Get(spec.sourceSnap)
		if !ok {
			return data, d.sourceMissing(spec, "snapshot", spec.sourceSnap)
		}
		data, size, accessType = d.snapshotData(snap), snap.SizeBytes, snap.AccessType
	case spec.sourceVol != "":
		src, ok := d.volumes.Get(spec.sourceVol)
		if !ok {
			return data, d.sourceMissing(spec, "volume", spec.sourceVol)
		}
		if err := d.volumeDataReady(src); err != nil {
			return data, err
		}
		if err := d.syncBlockDevices(src); err != nil {
			return data, err
		}
		data, size, accessType = volumeData{path: d.volumePath(src.ID)}, src.CapacityBytes, src.AccessType
	default:
		return data, nil
	}
	if accessType != spec.accessType {
		return volumeData{}, status.Errorf(codes.InvalidArgument, "source is a %s volume, the request asks for %s", accessType, spec.accessType)
	}
	if size > spec.size {
		return volumeData{}, status.Errorf(codes.OutOfRange, "source holds %d bytes, more than the %d requested", size, spec.size)
	}
	return data, nil
}

// buildVolume creates a volume's data under a temporary name, from source
// with c when it names data, renames it into place and flushes it (see
// installData). c.Sync says whether copied data itself is flushed.
func (d *Driver) buildVolume(c fscopy.Copier, id string, accessType state.AccessType, size int64, source volumeData) error {
	final := d.volumePath(id)
	tmp := tempPath(final)
	made, err := d.writeVolumeData(c, tmp, accessType, size, source)
	if errors.Is(err, fs.ErrExist) {
		// Left by an attempt whose cleanup failed; Recover removes it too.
		if err := os.RemoveAll(tmp); err != nil {
			return status.Errorf(codes.Internal, "clear temp data: %v", err)
		}
		made, err = d.writeVolumeData(c, tmp, accessType, size, source)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return status.Errorf(codes.Internal, "create volume data: %v", err)
	}
	return d.installData(c, tmp, final, made)
}

// writeVolumeData creates a volume's data at path: a copy of source, or an
// empty directory or sparse file of size bytes.
func (d *Driver) writeVolumeData(c fscopy.Copier, path string, accessType state.AccessType, size int64, source volumeData) (fscopy.Copied, error) {
	if source.path != "" {
		made, err := c.CopyPath(path, source.path)
		if err == nil && accessType == state.AccessBlock {
			err = resizeFile(path, size, c.Sync)
		}
		return made, err
	}
	if accessType == state.AccessMount {
		return makeEmptyDir(path, source)
	}
	return fscopy.Copied{}, makeEmptyFile(path, size, source, d.opts.Sync)
}

// makeEmptyDir creates an empty filesystem volume at path. Pods of any user
// must be able to write a new volume; one restored from an empty snapshot
// gets the snapshot's permission bits and owner.
func makeEmptyDir(path string, source volumeData) (fscopy.Copied, error) {
	if err := os.Mkdir(path, 0o750); err != nil {
		return fscopy.Copied{}, err
	}
	mode := fs.FileMode(0o777)
	if source.setMode {
		mode = source.mode
		if fscopy.CanChown {
			if err := os.Lchown(path, int(source.uid), int(source.gid)); err != nil {
				return fscopy.Copied{}, err
			}
		}
	}
	return fscopy.Copied{Dirs: []string{"."}}, os.Chmod(path, mode)
}

// makeEmptyFile creates an empty block volume at path: a sparse file of
// size bytes, with an empty snapshot's permission bits and owner when it is
// restored from one. With sync it is flushed.
func makeEmptyFile(path string, size int64, source volumeData, sync bool) error {
	return createSparse(path, os.O_WRONLY, 0o660, size, sync, func(f *os.File) error {
		if !source.setMode {
			return nil
		}
		if fscopy.CanChown {
			if err := f.Chown(int(source.uid), int(source.gid)); err != nil {
				return err
			}
		}
		return f.Chmod(source.mode)
	})
}

// createSparse creates a file at path, which must not exist yet, opened
// with flag and perm, as a hole of size bytes; then it lets fill write to
// it, flushes it with sync and closes it.
func createSparse(path string, flag int, perm os.FileMode, size int64, sync bool, fill func(*os.File) error) (err error) {
	f, err := os.OpenFile(path, flag|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if err := f.Truncate(size); err != nil {
		return err
	}
	if err := fill(f); err != nil {
		return err
	}
	if sync {
		return f.Sync()
	}
	return nil
}

// resizeFile sets a block volume's size, leaving new space as a hole.
func resizeFile(path string, size int64, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	if sync {
		return f.Sync()
	}
	return nil
}
