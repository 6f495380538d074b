//go:build linux

package hostpathtest

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shutter-csi/shutter/pkg/hostpath/mounter"
)

// checkedFlags are the mount flags mounter.Interface's Bind promises.
const checkedFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV

// RunMounterContract checks, in the empty folder dir, that m does what
// mounter.Interface promises; flagsOf returns the flags of the topmost
// mount at a path. The kernel's Mounter (as root) and FakeMounter both
// pass it. It leaves nothing mounted or attached.
func RunMounterContract(t *testing.T, m mounter.Interface, dir string, flagsOf func(string) (uintptr, error)) {
	t.Helper()
	src, target, blk, devTarget := filepath.Join(dir, "src"), filepath.Join(dir, "target"), filepath.Join(dir, "blk"), filepath.Join(dir, "dev")
	for _, d := range []string{src, target} {
		must(t, os.Mkdir(d, 0o700))
	}
	must(t, os.WriteFile(blk, make([]byte, 1<<20), 0o600))
	must(t, os.WriteFile(devTarget, nil, 0o600))
	defer func() {
		_ = m.Unmount(target)
		_ = m.Unmount(devTarget)
		_ = m.DetachLoop(blk, false)
		_ = m.DetachLoop(blk, true)
	}()

	if err := m.Bind(src, filepath.Join(dir, "missing"), 0); err == nil {
		t.Error("Bind onto a target that does not exist succeeded")
	}
	if err := m.Bind(filepath.Join(dir, "missing"), target, 0); err == nil {
		t.Error("Bind from a source that does not exist succeeded")
	}
	wantMounted(t, m, target, false)
	must(t, m.Bind(src, target, unix.MS_NOSUID|unix.MS_NODEV))
	wantMounted(t, m, target, true)
	wantFlags(t, flagsOf, target, unix.MS_NOSUID|unix.MS_NODEV)
	must(t, m.Bind(src, target, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV))
	wantFlags(t, flagsOf, target, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV)
	must(t, m.Unmount(target)) // both
	wantMounted(t, m, target, false)
	must(t, m.Unmount(target))

	if _, err := m.AttachLoop(filepath.Join(dir, "missing"), false); err == nil {
		t.Error("AttachLoop of a file that does not exist succeeded")
	}
	rw, err := m.AttachLoop(blk, false)
	must(t, err)
	if again, err := m.AttachLoop(blk, false); err != nil || again != rw {
		t.Errorf("AttachLoop again = %q, %v; want the same device %q", again, err, rw)
	}
	ro, err := m.AttachLoop(blk, true)
	must(t, err)
	if ro == rw {
		t.Errorf("the read-only device of a file is its read-write one, %s", rw)
	}
	must(t, m.Bind(rw, devTarget, unix.MS_NOSUID))
	wantMounted(t, m, devTarget, true)
	wantFlags(t, flagsOf, devTarget, unix.MS_NOSUID)
	must(t, m.ResizeLoops(blk))
	must(t, m.SyncLoops(blk))
	must(t, m.Unmount(devTarget))
	must(t, m.DetachLoop(blk, false))
	must(t, m.DetachLoop(blk, false))
	if again, err := m.AttachLoop(blk, true); err != nil || again != ro {
		t.Errorf("AttachLoop read-only after detaching the read-write device = %q, %v; want %q", again, err, ro)
	}
	must(t, m.DetachLoop(blk, true))
	must(t, m.DetachLoop(filepath.Join(dir, "missing"), false))
	must(t, m.SyncLoops(filepath.Join(dir, "missing")))
}

func wantMounted(t *testing.T, m mounter.Interface, path string, want bool) {
	t.Helper()
	if got, err := m.IsMountPoint(path); err != nil || got != want {
		t.Errorf("IsMountPoint(%s) = %t, %v; want %t", path, got, err, want)
	}
}

func wantFlags(t *testing.T, flagsOf func(string) (uintptr, error), path string, want uintptr) {
	t.Helper()
	got, err := flagsOf(path)
	if err != nil || got&checkedFlags != want {
		t.Errorf("flags of the mount at %s = %#x, %v; want %#x", path, got&checkedFlags, err, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
