//go:build linux

package hostpathtest

import "testing"

func TestFakeMounterContract(t *testing.T) {
	m := &FakeMounter{}
	RunMounterContract(t, m, t.TempDir(), func(path string) (uintptr, error) {
		mounts := m.Mounted(path)
		if len(mounts) == 0 {
			return 0, nil
		}
		return mounts[len(mounts)-1].Flags, nil
	})
	if loops := m.Loops(); len(loops) != 0 {
		t.Errorf("loop devices left: %v", loops)
	}
}
