package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMountNamespaces (root): two nodes' mount namespaces each see their own folder at the one
// path every node's pods name, the host sees neither bind, and cleanNodes leaves no mount.
func TestMountNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount namespaces)")
	}
	dir := t.TempDir()
	shared := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountAll(mountNSDir(dir)) })
	var files []string
	for i := 1; i <= 2; i++ {
		own := filepath.Join(dir, "own", string(rune('0'+i)))
		if err := os.MkdirAll(own, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(own, "whose"), []byte{byte('0' + i)}, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := createMountNS(context.Background(), dir, i, [][2]string{{own, shared}})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	for i, f := range files {
		out, err := exec.Command("nsenter", "--mount="+f, "--", "cat", filepath.Join(shared, "whose")).CombinedOutput()
		if want := string(rune('1' + i)); err != nil || string(out) != want {
			t.Errorf("node %d sees %q (%v), want %q", i+1, out, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(shared, "whose")); err == nil {
		t.Error("the host sees a node's bind")
	}
	if err := cleanNodes(dir); err != nil {
		t.Fatal(err)
	}
	points, err := mountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) > 0 {
		t.Errorf("mounts left: %s", strings.Join(points, ", "))
	}
}
