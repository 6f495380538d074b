package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDetachLoops: the loop devices of files under a folder, deleted or not, are detached; one
// of a file elsewhere stays.
func TestDetachLoops(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("attaching loop devices needs root")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("no losetup")
	}
	dir, elsewhere := filepath.Join(t.TempDir(), "node"), t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	attach := func(path string) string {
		if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("losetup", "--find", "--show", path).CombinedOutput()
		if err != nil {
			t.Skipf("losetup: %v: %s", err, out)
		}
		dev := strings.TrimSpace(string(out))
		t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
		return dev
	}
	kept := attach(filepath.Join(dir, "data", "kept"))
	deleted := attach(filepath.Join(dir, "data", "deleted"))
	if err := os.Remove(filepath.Join(dir, "data", "deleted")); err != nil {
		t.Fatal(err)
	}
	other := attach(filepath.Join(elsewhere, "other"))
	under, err := LoopsUnder(dir)
	slices.Sort(under)
	want := []string{kept, deleted}
	slices.Sort(want)
	if err != nil || !slices.Equal(under, want) {
		t.Fatalf("LoopsUnder = %v, %v; want %v", under, err, want)
	}
	if err := detachLoops(dir); err != nil {
		t.Fatal(err)
	}
	if under, err := LoopsUnder(dir); err != nil || len(under) != 0 {
		t.Errorf("after detachLoops: %v, %v", under, err)
	}
	if left, _ := LoopsUnder(elsewhere); !slices.Equal(left, []string{other}) {
		t.Errorf("the device of a file elsewhere: %v, want %s attached", left, other)
	}
}
