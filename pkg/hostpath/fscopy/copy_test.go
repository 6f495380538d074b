//go:build linux

package fscopy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shutter-csi/shutter/internal/fstest"
)

// noise returns n bytes without runs of zeros, the same in every run.
func noise(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{'s', 'h', 'u', 't'}).Read(b)
	return b
}

// writeSparse creates a file at path of size bytes that holds each of
// extents' data at its offset, and holes elsewhere.
func writeSparse(t *testing.T, path string, size int64, extents map[int64][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off, data := range extents {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

func TestCopyFileKeepsHolesAndDropsZeros(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	data := noise(1 << 20)
	// Layout: hole, 1 MiB data, 8 MiB of written zeros, 1 MiB data, hole.
	writeSparse(t, src, 32<<20, map[int64][]byte{4 << 20: data, 5 << 20: make([]byte, 8<<20), 13 << 20: data})

	for _, sync := range []bool{false, true} {
		dst := filepath.Join(dir, "dst")
		_ = os.Remove(dst)
		if _, err := (Copier{Sync: sync, NoReflink: true}).CopyPath(dst, src); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(src)
		got, _ := os.ReadFile(dst)
		if !bytes.Equal(got, want) {
			t.Fatal("copy differs from source")
		}
		// The written zeros must not be copied: only the two data MiBs.
		if a := fstest.Allocated(t, dst); a > 3<<20 {
			t.Fatalf("copy allocates %d bytes, want about 2 MiB", a)
		}
	}
}

func TestCopyRefusesExistingTarget(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.WriteFile(src, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (Copier{}).CopyPath(dst, src); err == nil {
		t.Fatal("copy over an existing file succeeded")
	}
}

func TestIsZero(t *testing.T) {
	b := make([]byte, 1031)
	if !isZero(b) {
		t.Fatal("zeros not detected")
	}
	for _, i := range []int{0, 7, 8, 1024, 1030} {
		b[i] = 1
		if isZero(b) {
			t.Fatalf("byte %d missed", i)
		}
		b[i] = 0
	}
}

// sparseSource writes a file with holes, data extents whose ends are not
// block aligned and a size that is not a multiple of the block size, and
// returns its path and content.
func sparseSource(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	src := filepath.Join(dir, "src")
	data := noise(3<<20 + 123)
	// The last extent needs more direct writes than there are buffers.
	long := noise((directDepth+3)*directChunk + 5)
	writeSparse(t, src, int64(30<<20+len(long))+8<<20+777, map[int64][]byte{0: data, 8<<20 + 100: data, 20 << 20: data, 30 << 20: long})
	want, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	return src, want
}

// TestDirectCopyMatchesSourceAndKeepsHoles copies a snapshot-like file the
// way restores do: with direct I/O, and again with direct I/O refused.
func TestDirectCopyMatchesSourceAndKeepsHoles(t *testing.T) {
	dir := t.TempDir()
	src, want := sparseSource(t, dir)
	// The direct path itself must work here, or the test below would only
	// exercise the fallback.
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	probe, err := os.Create(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if err := copyExtentsDirect(probe, in, int64(len(want))); errors.Is(err, errDirectUnsupported) {
		t.Skipf("the test directory refuses direct I/O: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	for _, refuse := range []bool{false, true} {
		if refuse {
			saved := openDirect
			openDirect = func(*os.File) (*os.File, error) { return nil, &os.PathError{Op: "open", Err: unix.EINVAL} }
			t.Cleanup(func() { openDirect = saved })
		}
		for _, sync := range []bool{false, true} {
			dst := filepath.Join(dir, "dst")
			_ = os.Remove(dst)
			c := Copier{Sync: sync, NoReflink: true, HolesKnown: true, Direct: true}
			if _, err := c.CopyPath(dst, src); err != nil {
				t.Fatalf("refuse=%t sync=%t: %v", refuse, sync, err)
			}
			got, err := os.ReadFile(dst)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("refuse=%t sync=%t: copy differs from source (err %v)", refuse, sync, err)
			}
			// The data extents only (about 57 MiB); the rest stays a hole.
			if a := fstest.Allocated(t, dst); a > 64<<20 {
				t.Fatalf("refuse=%t sync=%t: copy allocates %d bytes", refuse, sync, a)
			}
		}
	}
}

// TestCopySmallFileAllocatesLittle: copying a small file must not allocate
// a whole copy chunk, which made small-file snapshots cost milliseconds.
func TestCopySmallFileAllocatesLittle(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, noise(4<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	const copies = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range copies {
		if _, err := (Copier{NoReflink: true}).CopyPath(filepath.Join(dir, fmt.Sprint(i)), src); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if perCopy := (after.TotalAlloc - before.TotalAlloc) / copies; perCopy > 256<<10 {
		t.Fatalf("copying a 4 KiB file allocates %d bytes", perCopy)
	}
	want, _ := os.ReadFile(src)
	if got, err := os.ReadFile(filepath.Join(dir, "0")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copy differs from source (err %v)", err)
	}
}
