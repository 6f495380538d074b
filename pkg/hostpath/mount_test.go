//go:build linux

package hostpath

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shutter-csi/shutter/pkg/hostpath/hostpathtest"
)

// TestKernelMounterContract holds the kernel's Mounter to the contract
// hostpathtest.FakeMounter keeps too.
func TestKernelMounterContract(t *testing.T) {
	requireRoot(t)
	if err := checkLoopSupport(); err != nil {
		t.Skipf("loop devices cannot be used here: %v", err)
	}
	dir := t.TempDir()
	t.Cleanup(func() { checkNothingLeft(t, dir) })
	hostpathtest.RunMounterContract(t, kernelMounter{}, dir, statfsFlags)
}

// statfsFlags returns the flags of the mount at path.
func statfsFlags(path string) (uintptr, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return uintptr(st.Flags), nil
}
