// Package node tests the local node of test/cluster: a hostNetwork pod of a locally built image
// runs on it and reaches the API server, and stopping the node leaves nothing behind on the host.
// It needs root and the node's binaries (hack/build-tools.sh node; `make test` builds them).
package node

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/testenv"
)

const probeImage = "localhost/shutter/apiprobe:test"

func TestHostNetworkPodReachesAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	registry := startRegistry(t)
	n := startNode(t, ctx, true, registry.addr)
	// kubelet has set its sysctls, so that the check after stopping means something.
	if running := snapshotHost(t); running.sysctls["vm/overcommit_memory"] != "1" {
		t.Errorf("vm.overcommit_memory = %s while kubelet runs, want kubelet's 1", running.sysctls["vm/overcommit_memory"])
	}
	port := strings.TrimPrefix(n.c.URL, "https://127.0.0.1:")
	pod := runProbe(t, ctx, n.cs, port)
	logs, err := n.cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs through kubelet: %v", err)
	}
	if want := "authenticated as system:serviceaccount:default:default"; !strings.Contains(string(logs), want) {
		t.Errorf("probe logs %q, want %q", logs, want)
	}
	t.Run("UnknownImage", func(t *testing.T) { unknownImageStaysOnLoopback(t, ctx, n.cs, registry) })

	if err := n.c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	n.assertClean(t)
	if err := n.c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestStopDirAfterCrash kills kubelet and containerd while a pod runs, as a crash would, and
// checks that stopping from the state folder (hack/cluster down) still cleans up everything:
// the pod's processes, its shim, mounts, cgroups and sysctls.
func TestStopDirAfterCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := startNode(t, ctx, false, "")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork: true,
			Containers: []corev1.Container{{
				Name: "sleeper", Image: cluster.PauseImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	createPod(t, ctx, n.cs, pod)
	waitPod(t, ctx, n.cs, pod.Name, corev1.PodRunning)
	for _, name := range []string{"kubelet", "containerd"} {
		data, err := os.ReadFile(filepath.Join(n.dir, name+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s: %v", name, err)
		}
	}
	if err := cluster.StopDir(n.dir); err != nil {
		t.Fatalf("StopDir: %v", err)
	}
	n.assertClean(t)
}

// node is a started cluster with a node, and the host as it was before.
type node struct {
	c      *cluster.Cluster
	cs     kubernetes.Interface
	dir    string
	before host
}

// startNode starts a control plane with a node in a temporary folder (with the apiprobe image
// when probe is set, and its pulls sent to registry, when not empty), or skips the test when that
// cannot run here.
func startNode(t *testing.T, ctx context.Context, probe bool, registry string) *node {
	t.Helper()
	bin := nodeTools(t)
	dir := t.TempDir()
	var images []string
	if probe {
		tar := filepath.Join(dir, "apiprobe.tar")
		pkg := filepath.Join(testenv.RepoRoot(), "test", "images", "apiprobe")
		if err := cluster.BuildGoImage(ctx, pkg, probeImage, "65532:65532", tar); err != nil {
			t.Fatal(err)
		}
		images = append(images, tar)
	}
	return startNodeWith(t, ctx, bin, dir, cluster.NodeOptions{Images: images, Registry: registry})
}

// nodeTools returns the folder of the binaries of a control plane with a node and of extra. It
// skips the test under -short, when not root, or when one of them is not built.
func nodeTools(t *testing.T, extra ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a node; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the local node needs root (kubelet and containerd mount, make cgroups and set sysctls)")
	}
	tools := append([]string{"etcd", "kube-apiserver", "kube-controller-manager"}, extra...)
	return builtTools(t, "node", append(tools, cluster.NodeTools...)...)
}

// builtTools returns the folder of the named binaries, or skips the test when one of them is
// not built; `hack/build-tools.sh target` builds them (make test does).
func builtTools(t *testing.T, target string, names ...string) string {
	t.Helper()
	bin, ok, err := testenv.BuiltTools(names...)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skipf("%s not built: run hack/build-tools.sh %s", strings.Join(names, ", "), target)
	}
	return bin
}

// startNodeWith starts a control plane with a node of opts in dir/cluster, with the binaries of
// bin.
func startNodeWith(t *testing.T, ctx context.Context, bin, dir string, opts cluster.NodeOptions) *node {
	t.Helper()
	var err error
	n := &node{before: snapshotHost(t), dir: filepath.Join(dir, "cluster")}
	n.c, err = cluster.Start(ctx, cluster.Options{
		Dir: n.dir, BinDir: bin, Progress: testWriter{t},
		Node: &opts,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.c.Stop() })
	if n.cs, err = kubernetes.NewForConfig(n.c.Config); err != nil {
		t.Fatal(err)
	}
	return n
}

// assertClean checks that the stopped node left nothing behind.
func (n *node) assertClean(t *testing.T) {
	t.Helper()
	snapshotHost(t).assertSame(t, n.before)
	assertNothingUnder(t, n.dir)
}

// runProbe runs the apiprobe image in a hostNetwork pod that reaches the API server on
// 127.0.0.1 and waits until it has succeeded.
func runProbe(t *testing.T, ctx context.Context, cs kubernetes.Interface, port string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "apiprobe", Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork:   true,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "probe", Image: probeImage, ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{
					{Name: "KUBERNETES_SERVICE_HOST", Value: "127.0.0.1"},
					{Name: "KUBERNETES_SERVICE_PORT", Value: port},
				},
			}},
		},
	}
	createPod(t, ctx, cs, pod)
	return waitPod(t, ctx, cs, pod.Name, corev1.PodSucceeded)
}

// createPod creates pod, once the default ServiceAccount (which kube-controller-manager makes)
// exists.
func createPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	testenv.WaitUntil(t, "create pod "+pod.Name, time.Minute, func(ctx context.Context) bool {
		_, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil
	})
}

// waitPod waits until the pod in namespace default reaches phase.
func waitPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	defer func() {
		if t.Failed() {
			events, _ := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
			for _, e := range events.Items {
				t.Logf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}()
	return testenv.WaitFor(t, "pod "+name+" "+string(phase), 3*time.Minute, func(ctx context.Context) (*corev1.Pod, error) {
		return cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	}, func(p *corev1.Pod) bool {
		if p != nil && p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod %s failed: %+v", name, p.Status)
		}
		return p != nil && p.Status.Phase == phase
	})
}

// host is what the node may change on the host outside its state folder.
type host struct {
	sysctls map[string]string
	cgroups map[string]bool // top-level cgroups of every hierarchy
	// folders containerd and kubelet use whatever they are told (or by default), and their files
	files map[string]bool
	// otherNode: another local node held kubelet's sysctls (their record existed); the last
	// node to stop restores them, so they are not compared.
	otherNode bool
}

var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

func snapshotHost(t *testing.T) host {
	t.Helper()
	h := host{sysctls: map[string]string{}, cgroups: map[string]bool{}, files: map[string]bool{}}
	if _, err := os.Stat("/run/shutter-node-sysctls.json"); err == nil {
		h.otherNode = true
	}
	for _, dir := range []string{"/run/containerd", "/run/containerd/s", "/var/log/containers",
		"/var/lib/kubelet", "/var/lib/kubelet/device-plugins", "/etc/cni", "/opt/cni", "/var/lib/containerd"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		h.files[dir] = true
		for _, e := range entries {
			h.files[filepath.Join(dir, e.Name())] = true
		}
	}
	for _, s := range kubeletSysctls {
		data, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			t.Fatal(err)
		}
		h.sysctls[s] = strings.TrimSpace(string(data))
	}
	for _, m := range mounts(t) {
		if m.fsType != "cgroup" && m.fsType != "cgroup2" {
			continue
		}
		entries, err := os.ReadDir(m.point)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() {
				h.cgroups[filepath.Join(m.point, e.Name())] = true
			}
		}
	}
	return h
}

func (h host) assertSame(t *testing.T, before host) {
	t.Helper()
	if before.otherNode || h.otherNode {
		t.Log("another local node ran beside this one: the last to stop restores the sysctls; not compared")
		before.sysctls = nil
	}
	for name, v := range before.sysctls {
		if h.sysctls[name] != v {
			t.Errorf("sysctl %s = %s after stop, was %s", name, h.sysctls[name], v)
		}
	}
	for cg := range h.cgroups {
		// pkg/hostpath's quiesce tests, which may run beside this package, make and remove
		// cgroups of their own at the top of a hierarchy.
		if !before.cgroups[cg] && !strings.HasPrefix(filepath.Base(cg), "shutter-test-") {
			t.Errorf("cgroup %s left behind", cg)
		}
	}
	for f := range h.files {
		if !before.files[f] {
			t.Errorf("%s left behind", f)
		}
	}
}

// assertNothingUnder checks that no mount, no loop device and no process refers to the state
// folder.
func assertNothingUnder(t *testing.T, dir string) {
	t.Helper()
	loops, err := cluster.LoopsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range loops {
		t.Errorf("loop device left behind: %s", l)
	}
	for _, m := range mounts(t) {
		if strings.HasPrefix(m.point, dir+"/") || m.point == dir {
			t.Errorf("mount left behind: %s (%s)", m.point, m.fsType)
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if strings.Contains(string(cmdline), dir) {
			t.Errorf("process %d left behind: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
}

type mount struct{ point, fsType string }

func mounts(t *testing.T) []mount {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []mount
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && len(fields) > 4 {
				out = append(out, mount{point: fields[4], fsType: fields[i+1]})
				break
			}
		}
	}
	return out
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
