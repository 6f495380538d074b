//go:build linux

package hostpath

import (
	"errors"
	"fmt"

	"github.com/shutter-csi/shutter/pkg/mountinfo"
	"golang.org/x/sys/unix"
)

// bindMount makes source visible at target, read-only if asked. A read-only
// bind needs a second, remounting call: the first ignores MS_RDONLY.
func bindMount(source, target string, readOnly bool) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	if !readOnly {
		return nil
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		_ = unix.Unmount(target, 0)
		return fmt.Errorf("remount read-only: %w", err)
	}
	return nil
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
