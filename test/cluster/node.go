package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeOptions configure the node that Start runs beside the control plane: containerd with the
// runc shim and runc, kubelet and kube-scheduler, all from Options.BinDir. The node needs root
// and runs hostNetwork pods only (its one CNI network is loopback); nothing is ever pulled, so
// every image a pod uses must be imported first (Images) and be used with pull policy Never.
// containerd sends every pull to a loopback address (Registry) and pods resolve names through a
// loopback name server, so a wrong image or host name fails on loopback.
type NodeOptions struct {
	// Images are OCI image-layout tars imported into the node's containerd (namespace k8s.io)
	// before kubelet starts. The sandbox image is built and imported in any case.
	Images []string
	// Registry is the loopback host:port that containerd sends every image pull to, whatever
	// registry the image names; empty means ClosedRegistry. A test sets it to a listener of its
	// own to see a pull arrive there.
	Registry string
}

// registry returns the loopback address of the node's registry, or an error for any other.
func (o NodeOptions) registry() (string, error) {
	if o.Registry == "" {
		return ClosedRegistry, nil
	}
	host, _, err := net.SplitHostPort(o.Registry)
	if err != nil {
		return "", fmt.Errorf("node registry: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("node registry %s: want a loopback address", o.Registry)
	}
	return o.Registry, nil
}

// NodeName is the node's name. It is its address too: kubelet refuses a loopback --node-ip, but
// takes the address of a node named by one as it is; any other name would make kubelet pick the
// address of the machine's default route, and the node's traffic must stay on loopback.
const NodeName = "127.0.0.1"

// NodeTools are the binaries the node runs, for hack/build-tools.sh.
var NodeTools = []string{"kube-scheduler", "kubelet", "containerd", "ctr", "containerd-shim-runc-v2", "runc", "loopback"}

// nodeReadyTimeout bounds the wait for kubelet to register a Ready node.
const nodeReadyTimeout = 2 * time.Minute

// nodePorts are the loopback ports of the node's servers.
type nodePorts struct {
	kubelet, kubeletHealthz, scheduler int
}

// startNode starts containerd, kubelet and kube-scheduler and waits until the node is Ready.
func (c *Cluster) startNode(ctx context.Context, opts Options, ports nodePorts) error {
	name := NodeName
	registry, err := opts.Node.registry()
	if err != nil {
		return err
	}
	p := newNodePaths(opts.Dir)
	cgroup := nodeCgroup(opts.Dir)
	c.node, c.KubeletDir = &p, p.kubeletRoot
	if err := cleanNode(opts.Dir); err != nil {
		return fmt.Errorf("clean up an earlier node: %w", err)
	}
	if err := os.RemoveAll(p.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	fmt.Fprintln(opts.Progress, "cluster: building the node's sandbox image")
	pauseTar := filepath.Join(p.dir, "pause.tar")
	if err := buildPauseImage(ctx, pauseTar); err != nil {
		return fmt.Errorf("sandbox image: %w", err)
	}
	settings := kubeletSettings{cgroupRoot: cgroup, port: ports.kubelet, healthzPort: ports.kubeletHealthz}
	if err := writeNodeFiles(p, opts.Dir, opts.BinDir, PauseImage, registry, settings); err != nil {
		return err
	}
	if err := writeKubeconfig(p.kubeconfig, c.URL, opts.Dir, "node"); err != nil {
		return err
	}
	if err := recordHostDirs(p); err != nil {
		return err
	}
	if err := createCgroup(cgroup); err != nil {
		return fmt.Errorf("node cgroup: %w", err)
	}

	fmt.Fprintln(opts.Progress, "cluster: starting containerd")
	if err := c.runNodeProcess(opts, "containerd", []string{"--config", p.containerdConfig}, "runtime"); err != nil {
		return err
	}
	if err := c.waitSocket(ctx, p.containerdSocket); err != nil {
		return err
	}
	for _, image := range append([]string{pauseTar}, opts.Node.Images...) {
		if err := importImage(ctx, opts.BinDir, p.containerdSocket, image); err != nil {
			return err
		}
	}

	if err := holdSysctls(opts.Dir); err != nil {
		return fmt.Errorf("record sysctls: %w", err)
	}
	fmt.Fprintf(opts.Progress, "cluster: starting kubelet (node %s)\n", name)
	if err := c.runNodeProcess(opts, "kubelet", kubeletArgs(p, name), "kubelet"); err != nil {
		return err
	}
	healthz := "http://127.0.0.1:" + strconv.Itoa(ports.kubeletHealthz) + "/healthz"
	if err := c.waitHealthy(ctx, healthz, nil); err != nil {
		return err
	}
	fmt.Fprintln(opts.Progress, "cluster: starting kube-scheduler")
	if err := c.run(opts, "kube-scheduler", schedulerArgs(opts.Dir, c.Kubeconfig, ports.scheduler)); err != nil {
		return err
	}
	// Its serving certificate is self-signed; /healthz only tells that it runs, on loopback.
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec
	if err := c.waitHealthy(ctx, "https://127.0.0.1:"+strconv.Itoa(ports.scheduler)+"/healthz", insecure); err != nil {
		return err
	}
	return c.waitNodeReady(ctx, name)
}

// runNodeProcess starts a node component and moves it into the node's cgroup (child group sub)
// before it starts any container. The tools' folder comes first in its PATH (runc, the shim).
func (c *Cluster) runNodeProcess(opts Options, name string, args []string, sub string) error {
	if err := c.run(opts, name, args, "PATH="+opts.BinDir+":"+os.Getenv("PATH")); err != nil {
		return err
	}
	p := c.procs[len(c.procs)-1]
	return joinCgroup(nodeCgroup(opts.Dir), sub, p.cmd.Process.Pid)
}

func kubeletArgs(p nodePaths, name string) []string {
	return []string{
		"--config=" + p.kubeletConfig, "--kubeconfig=" + p.kubeconfig, "--root-dir=" + p.kubeletRoot,
		"--hostname-override=" + name,
	}
}

func schedulerArgs(dir, kubeconfig string, port int) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--leader-elect=false", "--cert-dir=" + filepath.Join(dir, "scheduler-certs"),
	}
}

// waitSocket waits until a unix socket accepts connections, a process exits, or readyTimeout.
func (c *Cluster) waitSocket(ctx context.Context, path string) error {
	return c.poll(ctx, readyTimeout, path, func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
}

// waitNodeReady waits until the node reports Ready.
func (c *Cluster) waitNodeReady(ctx context.Context, name string) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	return c.poll(ctx, nodeReadyTimeout, "node "+name+" Ready", func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// poll calls done every 100ms until it reports true or an error, a process exits, or timeout.
func (c *Cluster) poll(ctx context.Context, timeout time.Duration, what string, done func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		for _, p := range c.procs {
			if err := p.exited(); err != nil {
				return err
			}
		}
		ok, err := done(ctx)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w%s", what, ctx.Err(), c.logTails())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// importImage imports an OCI image-layout tar into containerd's k8s.io namespace (the CRI's).
func importImage(ctx context.Context, binDir, socket, tarPath string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "ctr"), "--address", socket, "--namespace", "k8s.io",
		"images", "import", tarPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", tarPath, err, out)
	}
	return nil
}

// ImportImages imports OCI image-layout tars into the running node's containerd.
func (c *Cluster) ImportImages(ctx context.Context, binDir string, tars ...string) error {
	if c.node == nil {
		return errors.New("this cluster has no node")
	}
	for _, t := range tars {
		if err := importImage(ctx, binDir, c.node.containerdSocket, t); err != nil {
			return err
		}
	}
	return nil
}

// KillContainer sends SIGKILL to the task of a container of the node (the ID of a pod's
// containerStatuses without its "containerd://"), as a crash would: the process ends at once,
// handing nothing back, and the kubelet sees a container that died.
func (c *Cluster) KillContainer(ctx context.Context, binDir, id string) error {
	if c.node == nil {
		return errors.New("this cluster has no node")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "ctr"), "--address", c.node.containerdSocket, "--namespace", "k8s.io",
		"tasks", "kill", "--signal", "SIGKILL", id)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr tasks kill %s: %w\n%s", id, err, out)
	}
	return nil
}

// stopNode is the node's part of Stop: kubelet and kube-scheduler are stopped already (they
// were started last); containerd is stopped here, then everything else is cleaned up.
func (c *Cluster) stopNode() error {
	if c.node == nil {
		return nil
	}
	dir := filepath.Dir(c.node.dir)
	c.node = nil
	return cleanNode(dir)
}

// cleanNode puts the host back after the node of state folder dir, whether it stopped, crashed
// or never ran: it kills every process left in the node's cgroup (containers, pause, shims),
// removes the shims' sockets, detaches every mount under the node's folder and then the loop
// devices of files under it (a block volume published when the node stopped keeps its device),
// removes the cgroups, kubelet's links to the node's pod logs, and gives back the node's hold on
// the sysctls.
// A second call finds nothing to do.
func cleanNode(dir string) error {
	return errors.Join(cleanHost(dir), releaseSysctls(dir))
}

// cleanHost is cleanNode but for the sysctls.
func cleanHost(dir string) error {
	p := newNodePaths(dir)
	var errs []error
	errs = append(errs, removeCgroup(nodeCgroup(dir)))
	errs = append(errs, removeShimSockets(p))
	errs = append(errs, unmountAll(p.dir))
	errs = append(errs, detachLoops(p.dir))
	errs = append(errs, removeLogLinks(p))
	errs = append(errs, removeHostDirs(p))
	return errors.Join(errs...)
}
