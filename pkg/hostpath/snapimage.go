//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// Snapshot images: the block view of snapshots of image volumes, for the
// SnapshotMetadata service.
//
// With --enable-snapshot-metadata a snapshot of an image volume keeps,
// besides its data (a file tree, which restores and clones copy), a sparse
// copy of the volume's filesystem image at snapshot-images/<id>. Its data
// extents are the snapshot's allocated ranges; two such copies, compared
// block by block, give the delta between two snapshots of the volume.
//
// Invariants:
//   - The copy is a point in time: the volume's filesystem is frozen
//     (FIFREEZE) while its image is copied, so every write that completed
//     before is in the copy and none after; the frozen filesystem's journal
//     is flushed, so the copy is a clean filesystem. One freeze at a time
//     per volume: a second concurrent snapshot of the volume gets Aborted
//     while the first holds it. The filesystem is thawed when the copy
//     ends, however it ends; a driver killed meanwhile leaves it frozen, and
//     start-up thaws every image volume it mounts.
//   - The snapshot's data is copied from the copy, mounted read-only at a
//     temporary mount point, so the tree that restores give and the ranges
//     the SnapshotMetadata service reports describe the same moment.
//   - The copy is complete and flushed, and renamed into place, before the
//     snapshot's record (ImageBytes) is written; deleting the snapshot
//     removes it after the record. Start-up unmounts mounts below
//     snapshot-images/ (a snapshot cut short), removes temporary names,
//     quarantines copies without a record and drops records whose copy is
//     missing or not of the recorded size.

// snapshotImagesDirName is the folder of snapshot images in the data folder.
const snapshotImagesDirName = "snapshot-images"

func snapshotImagesDir(dataDir string) string { return filepath.Join(dataDir, snapshotImagesDirName) }

// snapshotImagePath is where a snapshot's copy of its volume's image lives.
// id must have passed checkID.
func (d *Driver) snapshotImagePath(id string) string {
	return filepath.Join(snapshotImagesDir(d.opts.DataDir), id)
}

// snapshotImageMount is where the copy being made for snapshot id is
// mounted while the snapshot's data is copied from it.
func (d *Driver) snapshotImageMount(id string) string {
	return filepath.Join(snapshotImagesDir(d.opts.DataDir), tempPrefix+"mnt-"+id)
}

// keepsSnapshotImage says whether snapshots of v keep a copy of its image.
func (d *Driver) keepsSnapshotImage(v state.Volume) bool {
	return v.Image && d.opts.EnableSnapshotMetadata
}

// FIFREEZE and FITHAW are _IOWR('X', 119, int) and _IOWR('X', 120, int).
const (
	ioctlFreeze = 0xc0045877
	ioctlThaw   = 0xc0045878
)

// freezeKey is the lock key of a volume's filesystem freeze.
func freezeKey(volID string) string { return "freeze " + volID }

// takeImageSnapshot records a snapshot of image volume v with a copy of
// its image (see the invariants above). The caller holds the snapshot's
// lock and a shared lock of the volume.
func (d *Driver) takeImageSnapshot(ctx context.Context, snap state.Snapshot, v state.Volume) error {
	imgSize, err := fileSize(d.imagePath(v.ID))
	if err != nil {
		return status.Errorf(codes.Internal, "inspect volume image: %v", err)
	}
	release, err := d.reserve(snapshotKey(snap.ID), storedBytes(v)+imgSize, "")
	if err != nil {
		return err
	}
	defer release()
	final, tmp, mnt := d.snapshotImagePath(snap.ID), tempPath(d.snapshotImagePath(snap.ID)), d.snapshotImageMount(snap.ID)
	if err := clearTempImage(tmp, mnt); err != nil {
		return status.Errorf(codes.Internal, "clear temp data: %v", err)
	}
	defer func() { _ = os.Remove(tmp) }()
	if snap.ImageBytes, err = d.copyFrozenImage(v.ID, tmp); err != nil {
		return err
	}
	unmount, err := mountReadOnly(tmp, mnt)
	if err != nil {
		return status.Errorf(codes.Internal, "mount the copy of the volume's image: %v", err)
	}
	defer func() {
		if err := unmount(); err != nil {
			klog.FromContext(ctx).Error(err, "Unmounting a snapshot's image copy failed; the next start unmounts it", "path", mnt)
		}
	}()
	if err := d.installSnapshotImage(tmp, final); err != nil {
		return err
	}
	if err := d.recordSnapshotOf(ctx, snap, mnt, 0); err != nil {
		_ = os.Remove(final)
		return err
	}
	return nil
}

// copyFrozenImage copies the image of volume volID to path, sparse and,
// with fsync on, flushed, with the volume's filesystem frozen meanwhile,
// and returns the copy's size.
func (d *Driver) copyFrozenImage(volID, path string) (int64, error) {
	release, err := d.locks.acquire(freezeKey(volID))
	if err != nil {
		return 0, err
	}
	defer release()
	var made fscopy.Copied
	err = frozen(d.volumePath(volID), func() error {
		var err error
		made, err = fscopy.Copier{Sync: d.opts.Sync, HolesKnown: true}.CopyPath(path, d.imagePath(volID))
		return err
	})
	if err != nil {
		return 0, status.Errorf(codes.Internal, "copy the volume's image: %v", err)
	}
	return made.Manifest.Bytes, nil
}

// frozen runs fn with the filesystem mounted at mnt frozen, and thaws it
// after, whatever fn returns.
func frozen(mnt string, fn func() error) error {
	f, err := os.Open(mnt)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), ioctlFreeze, 0); err != nil {
		return fmt.Errorf("freeze %s: %w", mnt, err)
	}
	err = fn()
	if terr := unix.IoctlSetInt(int(f.Fd()), ioctlThaw, 0); terr != nil {
		err = errors.Join(err, fmt.Errorf("thaw %s: %w", mnt, terr))
	}
	return err
}

// thawFS thaws the filesystem mounted at mnt and reports whether it was
// frozen.
func thawFS(mnt string) (bool, error) {
	f, err := os.Open(mnt)
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = unix.IoctlSetInt(int(f.Fd()), ioctlThaw, 0)
	if errors.Is(err, unix.EINVAL) {
		return false, nil
	}
	return err == nil, err
}

// mountReadOnly mounts the ext4 image at img read-only at mnt, which it
// creates, and returns the function that unmounts it and removes mnt. The
// loop device goes with the mount (autoclear).
func mountReadOnly(img, mnt string) (func() error, error) {
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return nil, err
	}
	dev, f, err := attachLoopWith(img, unix.LO_FLAGS_READ_ONLY|unix.LO_FLAGS_AUTOCLEAR)
	if err != nil {
		_ = os.Remove(mnt)
		return nil, err
	}
	err = unix.Mount(dev.path, mnt, "ext4", imageMountFlags|unix.MS_RDONLY, "")
	_ = f.Close()
	if err != nil {
		_ = os.Remove(mnt)
		return nil, fmt.Errorf("mount %s: %w", dev.path, err)
	}
	return func() error {
		if err := unmountAll(mnt); err != nil {
			return err
		}
		return os.Remove(mnt)
	}, nil
}

// installSnapshotImage renames the copy at tmp to final and, with fsync
// on, flushes the folder, so that the copy is durable before the record
// that names it.
func (d *Driver) installSnapshotImage(tmp, final string) error {
	if err := d.moveIntoPlace(tmp, final); err != nil {
		return status.Errorf(codes.Internal, "install snapshot image: %v", err)
	}
	if d.opts.Sync {
		if err := state.SyncDir(filepath.Dir(final)); err != nil {
			_ = os.Remove(final)
			return status.Errorf(codes.Internal, "flush snapshot images folder: %v", err)
		}
	}
	return nil
}

// checkSnapshotImage describes what is wrong with the image copy of
// snapshot s, or returns "" when it has the recorded size (or s has none).
func (d *Driver) checkSnapshotImage(s state.Snapshot) string {
	if s.ImageBytes == 0 {
		return ""
	}
	size, err := fileSize(d.snapshotImagePath(s.ID))
	if err != nil {
		return err.Error()
	}
	if size != s.ImageBytes {
		return fmt.Sprintf("image copy holds %d bytes, the record %d", size, s.ImageBytes)
	}
	return ""
}

// hasSnapshotImage reports whether id names a snapshot whose record keeps
// an image copy.
func (d *Driver) hasSnapshotImage(id string) bool {
	s, ok := d.snapshots.Get(id)
	return ok && s.ImageBytes > 0
}

// unmountSnapshotImageStrays unmounts whatever is mounted below
// snapshot-images/ at start: copies a snapshot cut short left mounted.
func (d *Driver) unmountSnapshotImageStrays(logger klog.Logger) error {
	return unmountBelow(snapshotImagesDir(d.opts.DataDir), func(mountPoint string) bool {
		logger.Info("Unmounting the image copy of a snapshot cut short", "path", mountPoint)
		return true
	})
}

// thawImages thaws the filesystems of the image volumes the driver
// mounted: a driver killed while it copied an image left it frozen.
func (d *Driver) thawImages(logger klog.Logger) {
	for _, id := range d.mountedImages.Keys() {
		was, err := thawFS(d.volumePath(id))
		switch {
		case err != nil:
			logger.Error(err, "Thawing an image volume's filesystem failed", "volumeID", id)
		case was:
			logger.Info("Thawed an image volume's filesystem a previous driver left frozen", "volumeID", id)
		}
	}
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, &fs.PathError{Op: "inspect", Path: path, Err: errors.New("not a regular file")}
	}
	return fi.Size(), nil
}
