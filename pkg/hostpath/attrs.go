package hostpath

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// Copies keep what a workload needs besides the data: the owner and group
// (when the driver runs as root, as it does in a cluster), every permission
// bit including setuid, setgid and sticky, and the access and modification
// times. A database restored from a snapshot finds its files as it left
// them, not owned by root.

// canChown says whether copies keep owners: only root may give files away.
var canChown = os.Geteuid() == 0

// modeBits are the bits chmod sets.
const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// statOf returns the system's view of info, which carries owner and times.
func statOf(info fs.FileInfo) (*syscall.Stat_t, error) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("no owner and times for %s", info.Name())
	}
	return st, nil
}

// timesOf is the access and modification time of st, for utimensat.
func timesOf(st *syscall.Stat_t) []unix.Timespec {
	return []unix.Timespec{
		{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec},
		{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
	}
}

// keepFileAttrs gives the open copy f the owner, mode and times of info.
// Call it after the data is written (writing sets the modification time)
// and before f is flushed.
func keepFileAttrs(f *os.File, info fs.FileInfo) error {
	st, err := statOf(info)
	if err != nil {
		return err
	}
	if canChown {
		if err := f.Chown(int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("keep owner: %w", err)
		}
	}
	// After chown, which clears setuid and setgid.
	if err := f.Chmod(info.Mode() & modeBits); err != nil {
		return fmt.Errorf("keep mode: %w", err)
	}
	// By name: utimensat takes AT_EMPTY_PATH only on recent kernels.
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, f.Name(), timesOf(st), 0); err != nil {
		return fmt.Errorf("keep times: %w", err)
	}
	return nil
}

// keepDirAttrs gives the new directory path the owner and mode of info. Its
// times are set by keepDirTimes once its entries exist.
func keepDirAttrs(path string, info fs.FileInfo) error {
	if canChown {
		st, err := statOf(info)
		if err != nil {
			return err
		}
		if err := os.Lchown(path, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("keep owner: %w", err)
		}
	}
	if err := os.Chmod(path, info.Mode()&modeBits); err != nil {
		return fmt.Errorf("keep mode: %w", err)
	}
	return nil
}

// keepLinkAttrs gives the new symlink path the owner and times of info (a
// symlink's mode means nothing on Linux).
func keepLinkAttrs(path string, info fs.FileInfo) error {
	st, err := statOf(info)
	if err != nil {
		return err
	}
	if canChown {
		if err := os.Lchown(path, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("keep owner: %w", err)
		}
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, timesOf(st), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("keep times: %w", err)
	}
	return nil
}

// dirTimes are the times of a copied directory, set after its entries.
type dirTimes struct {
	rel   string
	times []unix.Timespec
}

// keepDirTimes sets the times of the directories copied under root,
// deepest first: creating an entry changes its parent's modification time.
func keepDirTimes(root string, dirs []dirTimes) error {
	for _, d := range slices.Backward(dirs) {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(root, d.rel), d.times, 0); err != nil {
			return fmt.Errorf("keep times of %s: %w", d.rel, err)
		}
	}
	return nil
}
