//go:build linux

// Package fstest gives tests small filesystems of their own: a tmpfs of a given size, mounted for
// the test and unmounted after it, a way to fill one up, and what a file occupies on disk.
package fstest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// MountTmpfs mounts a tmpfs of size bytes on a new directory and unmounts it when the test ends.
// It skips the test when not run as root or when the mount is refused.
func MountTmpfs(t testing.TB, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// Allocated returns the bytes the file at path occupies on disk.
func Allocated(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// AllocatedUnder is the disk space the regular files under dir take on dir's filesystem (what
// is mounted below dir is not counted), a count that, unlike the filesystem's free space, no
// other process writing beside a test can change.
func AllocatedUnder(t testing.TB, dir string) int64 {
	t.Helper()
	var root unix.Stat_t
	if err := unix.Stat(dir, &root); err != nil {
		t.Fatal(err)
	}
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		switch {
		case st.Dev != root.Dev && d.IsDir():
			return fs.SkipDir
		case d.Type().IsRegular():
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// FillDisk writes a file into dir until its filesystem is full and returns the file's path;
// removing the file frees the space again.
func FillDisk(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
}
