//go:build linux

package fscopy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDiskUsageStaysInside: usage counts the volume's own files, not those
// behind a symlink, and a FIFO does not block it.
func TestDiskUsageStaysInside(t *testing.T) {
	dir := t.TempDir()
	outside, root := filepath.Join(dir, "outside"), filepath.Join(dir, "vol")
	if err := errors.Join( // in this order
		os.Mkdir(outside, 0o755),
		os.WriteFile(filepath.Join(outside, "big"), noise(1<<20), 0o644),
		os.Mkdir(root, 0o755),
		os.Symlink(outside, filepath.Join(root, "link")),
		unix.Mkfifo(filepath.Join(root, "pipe"), 0o644),
	); err != nil {
		t.Fatal(err)
	}
	used, err := DiskUsage(root)
	if err != nil {
		t.Fatal(err)
	}
	if used >= 1<<20 {
		t.Fatalf("usage %d counts the file behind a symlink", used)
	}
}
