package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeRegistryIsLoopback: the node's registry is a closed loopback port unless a loopback
// address is given; any other address is refused before anything starts.
func TestNodeRegistryIsLoopback(t *testing.T) {
	for _, tc := range []struct {
		registry, want string
		fails          bool
	}{
		{registry: "", want: "127.0.0.1:1"},
		{registry: "127.0.0.1:5000", want: "127.0.0.1:5000"},
		{registry: "[::1]:5000", want: "[::1]:5000"},
		{registry: "10.0.0.1:5000", fails: true},
		{registry: "localhost:5000", fails: true},
		{registry: "127.0.0.1", fails: true},
	} {
		got, err := NodeOptions{Registry: tc.registry}.registry()
		if (err != nil) != tc.fails || got != tc.want {
			t.Errorf("registry %q: %q, %v; want %q, failure %v", tc.registry, got, err, tc.want, tc.fails)
		}
	}
}

// TestNodeFilesKeepPullsOnLoopback: containerd's CRI and transfer service read registry hosts
// from the node's folder, whose _default sends every registry to the given loopback address,
// and pods resolve names through a loopback name server.
func TestNodeFilesKeepPullsOnLoopback(t *testing.T) {
	dir := t.TempDir()
	bin := t.TempDir()
	p := newNodePaths(dir)
	if err := writeNodeFiles(p, dir, bin, PauseImage, "127.0.0.1:1", kubeletSettings{cgroupRoot: "x", port: 1, healthzPort: 2}); err != nil {
		t.Fatal(err)
	}
	read := func(path string) string {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	hosts := read(filepath.Join(dir, "node", "containerd", "certs.d", "_default", "hosts.toml"))
	if !strings.Contains(hosts, "\nserver = \"http://127.0.0.1:1\"\n") {
		t.Errorf("_default/hosts.toml:\n%s\nwant server = \"http://127.0.0.1:1\"", hosts)
	}
	config := read(p.containerdConfig)
	want := "config_path = \"" + filepath.Join(dir, "node", "containerd", "certs.d") + "\"\n"
	for _, section := range []string{"[plugins.'io.containerd.cri.v1.images'.registry]", "[plugins.'io.containerd.transfer.v1.local']"} {
		at := strings.Index(config, section+"\n")
		if at < 0 || !strings.HasPrefix(strings.TrimLeft(config[at+len(section)+1:], " "), want) {
			t.Errorf("containerd's config lacks %s %s", section, want)
		}
	}
	if got := read(filepath.Join(dir, "node", "resolv.conf")); got != "nameserver 127.0.0.1\n" {
		t.Errorf("pods' resolv.conf %q", got)
	}
	if kubelet := read(p.kubeletConfig); !strings.Contains(kubelet, "\nresolvConf: \""+filepath.Join(dir, "node", "resolv.conf")+"\"\n") {
		t.Errorf("kubelet's config does not name the node's resolv.conf:\n%s", kubelet)
	}
}
