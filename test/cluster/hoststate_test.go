package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSysctls points the sysctl record and the sysctls at a temporary folder holding the given
// values, and returns a function reading one back.
func fakeSysctls(t *testing.T, values map[string]string) func(string) string {
	t.Helper()
	dir := t.TempDir()
	oldSys, oldRecord := procSys, sysctlRecord
	procSys, sysctlRecord = filepath.Join(dir, "sys"), filepath.Join(dir, "record.json")
	t.Cleanup(func() { procSys, sysctlRecord = oldSys, oldRecord })
	for _, name := range kubeletSysctls {
		write(t, sysctlPath(name), values[name])
	}
	return func(name string) string {
		data, err := os.ReadFile(sysctlPath(name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
}

func write(t *testing.T, path, value string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
}

// original are the sysctls before any node.
func original() map[string]string {
	return map[string]string{
		"vm.overcommit_memory": "0", "vm.panic_on_oom": "0", "kernel.panic": "1",
		"kernel.panic_on_oops": "0", "kernel.keys.root_maxkeys": "200", "kernel.keys.root_maxbytes": "20000",
	}
}

// kubeletStarts changes the sysctls the way kubelet does.
func kubeletStarts(t *testing.T) {
	t.Helper()
	for name, v := range map[string]string{"vm.overcommit_memory": "1", "kernel.panic": "10", "kernel.panic_on_oops": "1"} {
		write(t, sysctlPath(name), v)
	}
}

// TestSysctlsRestoredByLastNode: two nodes overlap; the first to stop leaves kubelet's values for
// the other, the last writes back the values from before the first and removes the record.
func TestSysctlsRestoredByLastNode(t *testing.T) {
	read := fakeSysctls(t, original())
	a, b := t.TempDir(), t.TempDir()
	alive := map[string]bool{a: true, b: true}
	stubAlive(t, alive)

	if err := holdSysctls(a); err != nil {
		t.Fatal(err)
	}
	kubeletStarts(t)
	if err := holdSysctls(b); err != nil {
		t.Fatal(err)
	}
	if err := releaseSysctls(a); err != nil {
		t.Fatal(err)
	}
	alive[a] = false
	if got := read("kernel.panic"); got != "10" {
		t.Errorf("kernel.panic = %s while node b runs, want kubelet's 10", got)
	}
	if err := releaseSysctls(b); err != nil {
		t.Fatal(err)
	}
	for name, want := range original() {
		if got := read(name); got != want {
			t.Errorf("%s = %s after the last node stopped, want %s", name, got, want)
		}
	}
	if _, err := os.Stat(sysctlRecord); !os.IsNotExist(err) {
		t.Errorf("record after the last node stopped: %v, want it removed", err)
	}
	// A stop without a record (a second stop) changes nothing.
	if err := releaseSysctls(b); err != nil {
		t.Errorf("second release: %v", err)
	}
}

// TestSysctlsOfCrashedNode: a node that died without stopping keeps the record of the values
// before it; the next node does not record kubelet's values as the originals, and restores the
// real ones when it stops.
func TestSysctlsOfCrashedNode(t *testing.T) {
	read := fakeSysctls(t, original())
	crashed, next := t.TempDir(), t.TempDir()
	alive := map[string]bool{crashed: true}
	stubAlive(t, alive)
	if err := holdSysctls(crashed); err != nil {
		t.Fatal(err)
	}
	kubeletStarts(t)
	alive[crashed], alive[next] = false, true // killed; the next node's containerd runs

	if err := holdSysctls(next); err != nil {
		t.Fatal(err)
	}
	if err := releaseSysctls(next); err != nil {
		t.Fatal(err)
	}
	if got := read("vm.overcommit_memory"); got != "0" {
		t.Errorf("vm.overcommit_memory = %s, want the value from before the crashed node (0)", got)
	}
}

func stubAlive(t *testing.T, alive map[string]bool) {
	t.Helper()
	old := isNodeAlive
	isNodeAlive = func(dir string) bool { return alive[dir] }
	t.Cleanup(func() { isNodeAlive = old })
}
