//go:build linux

package hostpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
	"github.com/shutter-csi/shutter/pkg/mountinfo"
)

// Image-backed filesystem volumes (Options.VolumeBacking "image").
//
// A filesystem volume cannot outgrow its size when its data is a
// filesystem of that size: images/<id> is a sparse file holding an ext4
// filesystem (ext4.go), attached to a loop device (loop.go) and mounted at
// volumes/<id>, where a folder volume keeps its data. Everything that reads
// or publishes a volume's data (snapshots, clones, stage and publish) uses
// volumes/<id> as it does for a folder volume. A workload that writes past
// the volume's size gets ENOSPC from its own filesystem; the node's disk
// holds at most the image's size for it.
//
// Invariants:
//   - A record with Image names an image at images/<id> that holds the
//     volume's complete data. The image is built, filled and flushed under
//     a temporary name and mount point, renamed into place and mounted at
//     volumes/<id> before the record is written.
//   - Nothing reads or publishes an image volume's data unless the driver
//     mounted it (mounted): an unmounted mount point is an empty folder of
//     the node's disk, not the volume.
//   - Start-up mounts every recorded image volume, using the loop device
//     still attached to the image when there is one (a pod's mount keeps it
//     alive). Mounts below volumes/ that no record accounts for are
//     unmounted before the data folders are cleaned; images without a
//     record are quarantined like volume data.
//   - Close unmounts the driver's own mounts and nothing else; a pod's
//     mounts keep the filesystem (and its loop device) alive.

// imageMountFlags are the flags of the driver's mounts of images: a
// set-user-ID file or a device node in a volume has no effect.
const imageMountFlags = unix.MS_NOSUID | unix.MS_NODEV

// imagesDirName is the folder of volume images in the data folder.
const imagesDirName = "images"

func imagesDir(dataDir string) string { return filepath.Join(dataDir, imagesDirName) }

// imagePath is where an image volume's filesystem image lives. id must have
// passed checkID.
func (d *Driver) imagePath(id string) string { return filepath.Join(imagesDir(d.opts.DataDir), id) }

// imageBacked says whether a new volume of accessType gets an image.
func (d *Driver) imageBacked(accessType state.AccessType) bool {
	return d.opts.VolumeBacking == BackingImage && accessType == state.AccessMount
}

// volumeDataReady fails with Unavailable when v is an image volume the
// driver has not mounted.
func (d *Driver) volumeDataReady(v state.Volume) error {
	if !v.Image {
		return nil
	}
	if !d.mountedImages.Has(v.ID) {
		return status.Errorf(codes.Unavailable, "the filesystem of volume %s is not mounted (see the driver's log)", v.ID)
	}
	return nil
}

// buildImageVolume creates image volume v's data: a new image, filled from
// source (see fillImage) at a temporary mount point and flushed, renamed
// into place and mounted at the volume's path.
func (d *Driver) buildImageVolume(c fscopy.Copier, v state.Volume, source volumeData) error {
	img, final := d.imagePath(v.ID), d.volumePath(v.ID)
	tmpImg, tmpMnt := tempPath(img), tempPath(final)
	if err := clearTempImage(tmpImg, tmpMnt); err != nil {
		return status.Errorf(codes.Internal, "clear temp data: %v", err)
	}
	dev, err := d.makeFilledImage(c, tmpImg, tmpMnt, imageSize(v.CapacityBytes), source)
	defer func() {
		_ = unmountAll(tmpMnt)
		_ = os.Remove(tmpMnt)
		_ = os.Remove(tmpImg)
	}()
	if err != nil {
		return err
	}
	if err := d.moveIntoPlace(tmpImg, img); err != nil {
		return status.Errorf(codes.Internal, "install image: %v", err)
	}
	if d.opts.Sync {
		if err := state.SyncDir(imagesDir(d.opts.DataDir)); err != nil {
			return status.Errorf(codes.Internal, "flush images folder: %v", err)
		}
	}
	if err := d.mountDevice(dev, final); err != nil {
		_ = os.Remove(img)
		return status.Errorf(codes.Internal, "mount volume: %v", err)
	}
	d.mountedImages.Add(v.ID)
	return nil
}

// makeFilledImage makes an image of size bytes at path, mounts it at mnt
// and fills it from source, flushed with Sync. It returns the loop device,
// which stays attached while mnt is mounted.
func (d *Driver) makeFilledImage(c fscopy.Copier, path, mnt string, size int64, source volumeData) (loopDevice, error) {
	if err := makeImage(path, size, d.opts.Sync); err != nil {
		return loopDevice{}, status.Errorf(codes.Internal, "create image: %v", err)
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return loopDevice{}, status.Errorf(codes.Internal, "create mount point: %v", err)
	}
	dev, f, err := attachLoop(path)
	if err != nil {
		return loopDevice{}, status.Errorf(codes.Internal, "attach image: %v", err)
	}
	err = unix.Mount(dev.path, mnt, "ext4", imageMountFlags, "")
	_ = f.Close()
	if err != nil {
		return loopDevice{}, status.Errorf(codes.Internal, "mount new image: %v", err)
	}
	if err := fillImage(c, mnt, source); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return loopDevice{}, status.Errorf(codes.ResourceExhausted, "the source's data does not fit into %d bytes: %v", size, err)
		}
		return loopDevice{}, status.Errorf(codes.Internal, "fill volume: %v", err)
	}
	if d.opts.Sync {
		if err := syncFS(mnt); err != nil {
			return loopDevice{}, status.Errorf(codes.Internal, "flush volume: %v", err)
		}
	}
	return dev, nil
}

// clearTempImage removes what a failed attempt left at the temporary
// names: a mount, its mount point and the image.
func clearTempImage(tmpImg, tmpMnt string) error {
	if err := unmountAll(tmpMnt); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(tmpMnt); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(tmpImg); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// mountDevice mounts the filesystem on dev at path, making the mount point
// when needed. What is in the way at path, without a record (the caller
// holds the ID's lock and found none), goes to quarantine.
func (d *Driver) mountDevice(dev loopDevice, path string) error {
	if err := unmountAll(path); err != nil {
		return err
	}
	err := os.Mkdir(path, 0o700)
	if errors.Is(err, fs.ErrExist) {
		if err = os.Remove(path); err != nil { // an empty mount point goes, data goes to quarantine
			if err = d.quarantineInTheWay(path); err == nil {
				err = os.Mkdir(path, 0o700)
			}
		} else {
			err = os.Mkdir(path, 0o700)
		}
	}
	if err != nil {
		return err
	}
	return unix.Mount(dev.path, path, "ext4", imageMountFlags, "")
}

// fillImage gives the new filesystem mounted at root its content: a copy
// of source.path, or nothing with the default permission bits or those of
// an empty snapshot. The formatter's lost+found goes, so that a new
// volume is empty.
func fillImage(c fscopy.Copier, root string, source volumeData) error {
	if err := os.Remove(filepath.Join(root, "lost+found")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if source.path != "" {
		return copyIntoRoot(c, root, source.path)
	}
	mode := fs.FileMode(0o777)
	if source.setMode {
		mode = source.mode
		if fscopy.CanChown {
			if err := os.Lchown(root, int(source.uid), int(source.gid)); err != nil {
				return err
			}
		}
	}
	return os.Chmod(root, mode)
}

// copyIntoRoot copies the tree at src into the empty directory root, which
// the copy engine cannot create: into a folder in root, whose entries are
// then moved up (hard links stay hard links) and whose owner, mode and
// times root takes.
func copyIntoRoot(c fscopy.Copier, root, src string) error {
	tmp := filepath.Join(root, tempPrefix+"copy")
	if _, err := c.CopyPath(tmp, src); err != nil {
		return err
	}
	// Before the moves, which change the folder's times.
	var st unix.Stat_t
	if err := unix.Lstat(tmp, &st); err != nil {
		return err
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if slices.Contains(names, filepath.Base(tmp)) {
		// The source has an entry of the folder's own name: move the
		// folder out of its way first.
		moved := tmp + ".0"
		for i := 1; slices.Contains(names, filepath.Base(moved)); i++ {
			moved = fmt.Sprintf("%s.%d", tmp, i)
		}
		if err := renameat(tmp, moved); err != nil {
			return err
		}
		tmp = moved
	}
	for _, name := range names {
		if err := renameat(filepath.Join(tmp, name), filepath.Join(root, name)); err != nil {
			return err
		}
	}
	if err := os.Remove(tmp); err != nil {
		return err
	}
	f, err := os.Open(root)
	if err != nil {
		return err
	}
	defer f.Close()
	return fscopy.KeepAttrs(int(f.Fd()), unix.AT_FDCWD, root, &st)
}

// mountImage mounts image volume id at its path, using the loop device
// already attached to its image, if any; a volume mounted there already is
// left as it is.
func (d *Driver) mountImage(id string) error {
	path := d.volumePath(id)
	dev, f, err := attachLoop(d.imagePath(id))
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := mountAt(path)
	if err != nil {
		return err
	}
	if m != nil {
		if m.Dev != devString(dev.rdev) {
			return fmt.Errorf("%s has a filesystem of device %s mounted, not the volume's %s", path, m.Dev, dev.path)
		}
		d.mountedImages.Add(id)
		return nil
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := unix.Mount(dev.path, path, "ext4", imageMountFlags, ""); err != nil {
		return fmt.Errorf("mount %s: %w", dev.path, err)
	}
	d.mountedImages.Add(id)
	return nil
}

// unmountImage unmounts image volume id from its path.
func (d *Driver) unmountImage(id string) error {
	if err := unmountAll(d.volumePath(id)); err != nil {
		return status.Errorf(codes.Internal, "unmount volume: %v", err)
	}
	d.mountedImages.Remove(id)
	return nil
}

// removeVolumeData removes volume v's data: its folder, and an image
// volume's image. An image volume must be unmounted first.
func (d *Driver) removeVolumeData(v state.Volume) error {
	if err := removeData(d.volumePath(v.ID)); err != nil {
		return err
	}
	if !v.Image {
		return nil
	}
	if err := os.Remove(d.imagePath(v.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return status.Errorf(codes.Internal, "remove image: %v", err)
	}
	return nil
}

// mountAt returns the mount at path, the topmost one, or nil.
func mountAt(path string) (*mountinfo.Entry, error) {
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return nil, err
	}
	var found *mountinfo.Entry
	for i := range mounts {
		if mounts[i].MountPoint == path {
			found = &mounts[i]
		}
	}
	return found, nil
}

func devString(rdev uint64) string {
	return fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev))
}

// mountImages mounts every recorded image volume at start. A volume that
// cannot be mounted is logged and served as unavailable.
func (d *Driver) mountImages(logger klog.Logger) {
	for _, v := range d.volumes.List() {
		if !v.Image {
			continue
		}
		if err := d.mountImage(v.ID); err != nil {
			logger.Error(err, "Mounting an image volume failed; it is unavailable until a restart mounts it", "volumeID", v.ID)
		}
	}
}

// unmountStrays unmounts mounts directly below volumes/ that no image
// volume's record accounts for: what a crash left of a create (temporary
// or final mount point) or of a delete. It runs before the data folders
// are cleaned, which could not move or remove a mount point.
func (d *Driver) unmountStrays(logger klog.Logger) error {
	return unmountBelow(volumesDir(d.opts.DataDir), func(mountPoint string) bool {
		if v, ok := d.volumes.Get(filepath.Base(mountPoint)); ok && v.Image {
			return false
		}
		logger.Info("Unmounting a volume mount no record accounts for", "path", mountPoint)
		return true
	})
}

// unmountBelow unmounts every mount directly below dir for which stray holds.
func unmountBelow(dir string, stray func(mountPoint string) bool) error {
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if filepath.Dir(m.MountPoint) != dir || !stray(m.MountPoint) {
			continue
		}
		if err := unmountAll(m.MountPoint); err != nil {
			return err
		}
	}
	return nil
}

// hasImage reports whether id names an image volume's record.
func (d *Driver) hasImage(id string) bool {
	v, ok := d.volumes.Get(id)
	return ok && v.Image
}

// unmountImagesAtClose unmounts the driver's mounts of image volumes. A
// mount still in use stays; a pod's mounts are not the driver's and stay
// too.
func (d *Driver) unmountImagesAtClose() error {
	ids := d.mountedImages.Keys()
	var errs []error
	for _, id := range ids {
		if err := unix.Unmount(d.volumePath(id), 0); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount volume %s: %w", id, err))
			continue
		}
		d.mountedImages.Remove(id)
	}
	return errors.Join(errs...)
}

// imageVolumeStats reports an image volume's usage as its filesystem
// counts it: the total is what the filesystem offers, the volume's size
// less its journal and metadata.
func (d *Driver) imageVolumeStats(v state.Volume) (*csi.NodeGetVolumeStatsResponse, error) {
	if err := d.volumeDataReady(v); err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.volumePath(v.ID), &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs: %v", err)
	}
	bs := st.Bsize
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Total: int64(st.Blocks) * bs, Used: int64(st.Blocks-st.Bfree) * bs, Available: int64(st.Bavail) * bs, Unit: csi.VolumeUsage_BYTES},
		{Total: int64(st.Files), Used: int64(st.Files - st.Ffree), Available: int64(st.Ffree), Unit: csi.VolumeUsage_INODES},
	}}, nil
}

// canGrowImage fails with FailedPrecondition when image volume v cannot be
// grown to size bytes now: it is not mounted, or it is in use (staged or published) and
// the kernel would refuse to grow it online, which it does for a process
// without CAP_SYS_RESOURCE.
func (d *Driver) canGrowImage(v state.Volume, size int64) error {
	if err := d.volumeDataReady(v); err != nil {
		return status.Errorf(codes.FailedPrecondition, "volume %s: %v", v.ID, status.Convert(err).Message())
	}
	if fi, err := os.Stat(d.imagePath(v.ID)); err == nil && imageSize(size) <= fi.Size() {
		return nil // the image has the room already
	}
	if !canGrowFilesystems() && (v.Staged != "" || len(v.Published) > 0) {
		return status.Errorf(codes.FailedPrecondition, "volume %s is in use: %v; unpublish it to grow it offline", v.ID, errCannotGrow)
	}
	return nil
}

// growImageVolume grows image volume v to size bytes: online when the
// kernel lets this process (growImage), else, v being unused (see
// canGrowImage), by copying its data into a new image of that size, which
// replaces the old one by a rename. A crash before the rename leaves the
// old image (the new one, under its temporary name, is deleted at start);
// after it, the new one, whose size the next expansion records.
func (d *Driver) growImageVolume(v state.Volume, size int64) error {
	img, path := d.imagePath(v.ID), d.volumePath(v.ID)
	fi, err := os.Stat(img)
	if err != nil {
		return err
	}
	size = imageSize(size)
	if size <= fi.Size() {
		return nil // a small volume's image has the room already; never shrink
	}
	if canGrowFilesystems() {
		return growImage(img, path, size, d.opts.Sync)
	}
	tmpImg, tmpMnt := tempPath(img), tempPath(path)
	if err := clearTempImage(tmpImg, tmpMnt); err != nil {
		return err
	}
	defer func() {
		_ = unmountAll(tmpMnt)
		_ = os.Remove(tmpMnt)
		_ = os.Remove(tmpImg)
	}()
	dev, err := d.makeFilledImage(d.copier, tmpImg, tmpMnt, size, volumeData{path: path})
	if err != nil {
		return err
	}
	if err := d.unmountImage(v.ID); err != nil {
		return err
	}
	if err := renameat(tmpImg, img); err != nil {
		return errors.Join(err, d.mountImage(v.ID))
	}
	if d.opts.Sync {
		if err := state.SyncDir(imagesDir(d.opts.DataDir)); err != nil {
			return errors.Join(err, d.mountImage(v.ID))
		}
	}
	if err := d.mountDevice(dev, path); err != nil {
		return err
	}
	d.mountedImages.Add(v.ID)
	return nil
}
