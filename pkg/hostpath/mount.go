//go:build linux

package hostpath

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/shutter-csi/shutter/pkg/mountinfo"
)

// Mount flags of the binds the node service makes: nothing set-user-ID and
// no device node of a volume takes effect at a pod's mount. A block
// volume's device node is bound without nodev, which would make it unusable.
const (
	folderBindFlags = unix.MS_NOSUID | unix.MS_NODEV
	deviceBindFlags = unix.MS_NOSUID
)

// kernelMounter is the mounter.Interface of a process that may mount.
type kernelMounter struct{}

// Bind makes source visible at target with flags. The bind itself ignores
// them: a remount sets them.
func (kernelMounter) Bind(source, target string, flags uintptr) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	if flags == 0 {
		return nil
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|flags, ""); err != nil {
		_ = unix.Unmount(target, 0)
		return fmt.Errorf("remount with flags %#x: %w", flags, err)
	}
	return nil
}

func (kernelMounter) Unmount(target string) error            { return unmountAll(target) }
func (kernelMounter) IsMountPoint(path string) (bool, error) { return isMountPoint(path) }

func (kernelMounter) AttachLoop(path string, readOnly bool) (string, error) {
	flags := uint32(0)
	if readOnly {
		flags = unix.LO_FLAGS_READ_ONLY
	}
	dev, f, err := attachLoopWith(path, flags)
	if err != nil {
		return "", err
	}
	_ = f.Close()
	return dev.path, nil
}

func (kernelMounter) DetachLoop(path string, readOnly bool) error {
	return eachLoopOf(path, func(f *os.File, info *unix.LoopInfo64) error {
		if (info.Flags&unix.LO_FLAGS_READ_ONLY != 0) != readOnly {
			return nil
		}
		if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
			return fmt.Errorf("detach loop device: %w", err)
		}
		return nil
	})
}

func (kernelMounter) ResizeLoops(path string) error {
	return eachLoopOf(path, func(f *os.File, _ *unix.LoopInfo64) error {
		if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_SET_CAPACITY, 0); err != nil {
			return fmt.Errorf("resize loop device: %w", err)
		}
		return nil
	})
}

func (kernelMounter) SyncLoops(path string) error {
	return eachLoopOf(path, func(f *os.File, info *unix.LoopInfo64) error {
		if info.Flags&unix.LO_FLAGS_READ_ONLY != 0 {
			return nil
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("flush loop device: %w", err)
		}
		return nil
	})
}

// unmountAll removes every mount stacked on target.
func unmountAll(target string) error {
	for {
		mounted, err := isMountPoint(target)
		if err != nil || !mounted {
			return err
		}
		if err := unix.Unmount(target, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount: %w", err)
		}
	}
}

// isMountPoint reports whether path is a mount point, from
// /proc/self/mountinfo (bind mounts of the same filesystem share st_dev, so
// comparing with the parent does not work).
func isMountPoint(path string) (bool, error) {
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m.MountPoint == path {
			return true, nil
		}
	}
	return false, nil
}
