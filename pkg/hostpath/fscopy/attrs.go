//go:build linux

package fscopy

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Copies keep what a workload needs besides the data: the owner and group
// (when the driver runs as root, as it does in a cluster), every permission
// bit including setuid, setgid and sticky, and the access and modification
// times. A database restored from a snapshot finds its files as it left
// them, not owned by root.

// CanChown says whether copies keep owners: only root may give files away.
var CanChown = os.Geteuid() == 0

// timesOfStat is the access and modification time of st, for utimensat.
func timesOfStat(st *unix.Stat_t) []unix.Timespec {
	return []unix.Timespec{st.Atim, st.Mtim}
}

// keepFileAttrs gives the open copy f, name in dirfd, the owner, mode and
// times of st, its source's. Call it after the data is written (writing
// sets the modification time) and before f is flushed.
func keepFileAttrs(f *os.File, dirfd int, name string, st *unix.Stat_t) error {
	return KeepAttrs(int(f.Fd()), dirfd, name, st)
}

// KeepAttrs gives the copy open as fd, name in dirfd, the owner, mode and
// times of st. A directory's times are set once its entries exist.
func KeepAttrs(fd, dirfd int, name string, st *unix.Stat_t) error {
	if CanChown {
		if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("keep owner: %w", err)
		}
	}
	// After chown, which clears setuid and setgid.
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return fmt.Errorf("keep mode: %w", err)
	}
	if err := unix.UtimesNanoAt(dirfd, name, timesOfStat(st), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("keep times: %w", err)
	}
	return nil
}

// keepLinkAttrs gives the new symlink name in dirfd the owner and times of
// st (a symlink's mode means nothing on Linux).
func keepLinkAttrs(dirfd int, name string, st *unix.Stat_t) error {
	if CanChown {
		if err := unix.Fchownat(dirfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("keep owner: %w", err)
		}
	}
	if err := unix.UtimesNanoAt(dirfd, name, timesOfStat(st), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("keep times: %w", err)
	}
	return nil
}
