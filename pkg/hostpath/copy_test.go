package hostpath

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// allocated returns the bytes a file occupies on disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func TestCopyFileKeepsHolesAndDropsZeros(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	data := randomBytes(t, 1<<20)
	// Layout: hole, 1 MiB data, 8 MiB of written zeros, 1 MiB data, hole.
	if _, err := f.WriteAt(data, 4<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 8<<20), 5<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 13<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(32 << 20); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	for _, sync := range []bool{false, true} {
		dst := filepath.Join(dir, "dst")
		_ = os.Remove(dst)
		if _, err := (copier{sync: sync, noReflink: true}).copyPath(dst, src); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(src)
		got, _ := os.ReadFile(dst)
		if !bytes.Equal(got, want) {
			t.Fatal("copy differs from source")
		}
		// The written zeros must not be copied: only the two data MiBs.
		if a := allocated(t, dst); a > 3<<20 {
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
	if _, err := (copier{}).copyPath(dst, src); err == nil {
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
