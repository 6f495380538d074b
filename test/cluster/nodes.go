package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// A cluster of several nodes (Options.Nodes > 1) on one machine. Each node is what the single
// node is (its own containerd, kubelet, state folder Dir/n<i> and cgroup), and also has:
//
//   - its own network namespace and address (netns.go);
//   - its own mount namespace, where its own folders are bound over the paths every node's pods
//     name alike: kubelet's root (Dir/kubelet, the chart's hostpath.kubeletDir), the driver's
//     data folder (Dir/hostpath-data, hostpath.dataDir) and /var/lib/kubelet (whose
//     device-plugins folder kubelet uses whatever its root). A DaemonSet has one hostPath for
//     every node; on one machine, only separate mount namespaces give each node its own. The
//     namespaces are private: nothing mounted inside one shows on the host or in another, and
//     it all goes when the namespace's last process ends.
//
// One kube-scheduler serves them all, on the host beside the control plane.

// Node is one node of a cluster of several.
type Node struct {
	// Name is the node's name and its address (see nodeAddress).
	Name string
	// Netns names its network namespace (DialIn, `ip netns exec`).
	Netns string
	// Dir is its state folder; its components' logs are there.
	Dir string
}

// kubeletDefaultDirBind is /var/lib/kubelet's stand-in in a node's folder.
const kubeletDefaultDirBind = "var-lib-kubelet"

// nodeBinds are the per-node folders bound in node i's mount namespace, by the path they cover.
func nodeBinds(dir, nodeDir string) [][2]string {
	return [][2]string{
		{filepath.Join(nodeDir, "kubelet"), filepath.Join(dir, "kubelet")},
		{filepath.Join(nodeDir, "hostpath-data"), filepath.Join(dir, "hostpath-data")},
		{filepath.Join(nodeDir, kubeletDefaultDirBind), kubeletDefaultDir},
	}
}

// startNodes starts opts.Nodes nodes in namespaces of their own and kube-scheduler, and waits
// until every node is Ready.
func (c *Cluster) startNodes(ctx context.Context, opts Options, ports nodePorts) error {
	if err := cleanNodes(opts.Dir); err != nil {
		return fmt.Errorf("clean up earlier nodes: %w", err)
	}
	names, err := setupNetwork(ctx, opts.Dir, opts.Nodes)
	if err != nil {
		return err
	}
	c.fwd = &forwarder{}
	c.KubeletDir, c.DataDir = filepath.Join(opts.Dir, "kubelet"), filepath.Join(opts.Dir, "hostpath-data")
	// The host folders kubelet makes, recorded once for all nodes (removed by cleanNodes).
	shared := newNodePaths(opts.Dir)
	for _, d := range []string{shared.dir, c.KubeletDir, c.DataDir, kubeletDefaultDir} {
		if d == kubeletDefaultDir {
			if err := recordHostDirs(shared); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	fmt.Fprintln(opts.Progress, "cluster: building the nodes' sandbox image")
	pauseTar := filepath.Join(shared.dir, "pause.tar")
	if err := buildPauseImage(ctx, pauseTar); err != nil {
		return fmt.Errorf("sandbox image: %w", err)
	}
	apiAddr := strings.TrimPrefix(c.URL, "https://")
	for i, netns := range names {
		spec, err := c.prepareNode(ctx, opts, i+1, netns, ports)
		if err != nil {
			return err
		}
		spec.pauseTar = pauseTar
		if err := c.fwd.forward(netns, apiAddr, "", ""); err != nil {
			return err
		}
		if err := c.bootNode(ctx, opts, spec); err != nil {
			return fmt.Errorf("node %s: %w", spec.name, err)
		}
		if err := c.fwd.forward("", spec.name+":"+strconv.Itoa(ports.kubelet), netns, ""); err != nil {
			return err
		}
		c.Nodes = append(c.Nodes, Node{Name: spec.name, Netns: netns, Dir: spec.dir})
	}
	if err := c.startScheduler(ctx, opts, ports.scheduler); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := c.waitNodeReady(ctx, n.Name); err != nil {
			return err
		}
	}
	return nil
}

// prepareNode lays down node i's folder, certificates and mount namespace.
func (c *Cluster) prepareNode(ctx context.Context, opts Options, i int, netns string, ports nodePorts) (nodeSpec, error) {
	spec := nodeSpec{name: nodeAddress(i), dir: filepath.Join(opts.Dir, "n"+strconv.Itoa(i)), netns: netns,
		kubeletRoot: c.KubeletDir, ports: ports}
	binds := nodeBinds(opts.Dir, spec.dir)
	for _, b := range binds {
		// A fresh start: cleanNodes ended the namespace that had it mounted.
		if err := os.RemoveAll(b[0]); err != nil {
			return spec, err
		}
		if err := os.MkdirAll(b[0], 0o700); err != nil {
			return spec, err
		}
	}
	if err := writeNodeCertificates(opts.Dir, spec.dir, spec.name); err != nil {
		return spec, fmt.Errorf("node %s certificates: %w", spec.name, err)
	}
	mntns, err := createMountNS(ctx, opts.Dir, i, binds)
	if err != nil {
		return spec, fmt.Errorf("node %s mount namespace: %w", spec.name, err)
	}
	spec.mntns = mntns
	c.multi = append(c.multi, spec)
	return spec, nil
}

// mountNSDir is where the nodes' mount namespaces are kept (a private mount of itself: a
// namespace can only be kept on a mount that does not propagate).
func mountNSDir(dir string) string { return filepath.Join(dir, "mntns") }

// createMountNS makes node i's mount namespace, private, with binds (source, target) mounted in
// it, and returns the file that keeps it.
func createMountNS(ctx context.Context, dir string, i int, binds [][2]string) (string, error) {
	nsDir := mountNSDir(dir)
	if err := os.MkdirAll(nsDir, 0o700); err != nil {
		return "", err
	}
	points, err := mountsUnder(nsDir)
	if err != nil {
		return "", err
	}
	if !slices.Contains(points, nsDir) {
		if err := syscall.Mount(nsDir, nsDir, "", syscall.MS_BIND, ""); err != nil {
			return "", fmt.Errorf("bind %s: %w", nsDir, err)
		}
		if err := syscall.Mount("", nsDir, "", syscall.MS_PRIVATE, ""); err != nil {
			return "", fmt.Errorf("make %s private: %w", nsDir, err)
		}
	}
	file := filepath.Join(nsDir, "n"+strconv.Itoa(i))
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return "", err
	}
	cmds := [][]string{{"unshare", "--mount=" + file, "--propagation", "private", "true"}}
	for _, b := range binds {
		// Shared inside the namespace (its peers are all in it): containerd accepts a
		// Bidirectional volume (the driver's mounts into kubelet's pods folder) only from a
		// shared mount.
		cmds = append(cmds, []string{"nsenter", "--mount=" + file, "--", "mount", "--bind", b[0], b[1]},
			[]string{"nsenter", "--mount=" + file, "--", "mount", "--make-rshared", b[1]})
	}
	for _, args := range cmds {
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return file, nil
}

// stopNodes is the nodes' part of Stop (their processes are stopped already).
func (c *Cluster) stopNodes() error {
	if c.fwd == nil {
		return nil
	}
	c.fwd.close()
	c.fwd, c.multi, c.Nodes = nil, nil, nil
	return cleanNodes(c.Dir)
}

// nodeDirs lists the node folders Dir/n<i> of state folder dir.
func nodeDirs(dir string) []string {
	matches, _ := filepath.Glob(filepath.Join(dir, "n[0-9]*"))
	return matches
}

// cleanNodes puts the host back after the nodes of state folder dir, whether they stopped,
// crashed or never ran: every node's cleanNode (processes, cgroups, sysctls...), then the mount
// namespaces, the network namespaces and the host folders recorded for all nodes.
func cleanNodes(dir string) error {
	var errs []error
	for _, d := range nodeDirs(dir) {
		for _, name := range []string{"kubelet", "containerd"} {
			if pid := readPid(filepath.Join(d, name+".pid")); pid > 0 && isNodeAlive(d) {
				stopPid(pid)
			}
			_ = os.Remove(filepath.Join(d, name+".pid"))
		}
		errs = append(errs, cleanNode(d))
	}
	errs = append(errs, unmountAll(mountNSDir(dir)), removeNetwork(dir))
	if _, err := os.Stat(filepath.Join(newNodePaths(dir).dir, madeDirsFile)); err == nil {
		errs = append(errs, removeHostDirs(newNodePaths(dir)))
	}
	return errors.Join(errs...)
}

// readPid reads a pid file; 0 when there is none.
func readPid(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// nodeProcess finds the running component name of node n.
func (c *Cluster) nodeProcess(n Node, name string) (*process, int, error) {
	for i, p := range c.procs {
		if p.name == name && p.spec.dir == n.Dir {
			return p, i, nil
		}
	}
	return nil, -1, fmt.Errorf("no %s on node %s", name, n.Name)
}

// KillKubelet SIGKILLs node n's kubelet, as a crash would; its containers keep running.
func (c *Cluster) KillKubelet(n Node) error {
	p, i, err := c.nodeProcess(n, "kubelet")
	if err != nil {
		return err
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	c.procs = slices.Delete(c.procs, i, i+1)
	return nil
}

// StartKubelet starts node n's kubelet again after KillKubelet, as it ran before, and waits
// until it is healthy.
func (c *Cluster) StartKubelet(ctx context.Context, n Node) error {
	i := slices.IndexFunc(c.multi, func(s nodeSpec) bool { return s.dir == n.Dir })
	if i < 0 {
		return fmt.Errorf("no node %s", n.Name)
	}
	spec := c.multi[i]
	if err := c.runNodeProcess(c.opts, spec, "kubelet", kubeletArgs(spec.paths(), spec.name), "kubelet"); err != nil {
		return err
	}
	return c.waitHealthyIn(ctx, spec.netns, "http://127.0.0.1:"+strconv.Itoa(spec.ports.kubeletHealthz)+"/healthz", nil)
}

// NodeMemory is the resident memory of every process of node n (containerd, kubelet, shims and
// containers), from /proc: what the node costs the machine.
func (c *Cluster) NodeMemory(n Node) (int64, error) {
	roots, err := cgroupMounts()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, pid := range cgroupPids(roots, nodeCgroup(n.Dir)) {
		total += residentBytes(pid)
	}
	return total, nil
}

// residentBytes is a process's VmRSS; 0 when it is gone.
func residentBytes(pid int) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
