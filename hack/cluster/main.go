// Command cluster starts and stops a local control plane for development: `make cluster-up` and
// `make cluster-down` call it. The processes run detached; their state, logs and the admin
// kubeconfig live in the state folder (default: <user cache>/shutter/cluster).
//
// With -node (root only) a node runs too: containerd, kubelet and kube-scheduler, with the
// external-provisioner image built for it and the OCI image-layout tars of -images imported. It
// then writes DIR/node-values.yaml, the chart values that change per start, to use with the
// chart's ci/local-node-values.yaml.
//
// With -nodes N (N > 1, implies -node) N nodes run, each in network and mount namespaces of its
// own (docs/multi-node.md), and node-values.yaml selects the chart's distributed mode. `up` then
// stays in the foreground: it forwards between the nodes' namespaces and the host's loopback,
// and stops the cluster on Ctrl-C or `down` (SIGTERM to DIR/up.pid).
//
//	go run ./hack/cluster up [-dir DIR] [-audit-policy FILE] [-node [-images a.tar,b.tar]] [-nodes N]
//	go run ./hack/cluster down [-dir DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/testenv"
)

// upOptions are the flags of `up`.
type upOptions struct {
	dir, audit string
	node       bool
	nodes      int
	images     []string
}

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: cluster up|down [-dir DIR]"))
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var o upOptions
	fs.StringVar(&o.dir, "dir", defaultDir(), "state folder: certificates, etcd data, logs, kubeconfig")
	fs.StringVar(&o.audit, "audit-policy", "", "kube-apiserver audit policy file (log: DIR/audit.log)")
	fs.BoolVar(&o.node, "node", false, "run a node too (kubelet, containerd, kube-scheduler; needs root)")
	fs.IntVar(&o.nodes, "nodes", 1, "number of nodes; more than one run in namespaces of their own, in the foreground")
	images := fs.String("images", "", "comma-separated OCI image-layout tars to import into the node")
	_ = fs.Parse(os.Args[2:])
	for _, image := range strings.Split(*images, ",") {
		if image = strings.TrimSpace(image); image != "" {
			o.images = append(o.images, image)
		}
	}

	switch os.Args[1] {
	case "up":
		fail(up(o))
	case "down":
		stopped := stopForeground(o.dir)
		err := cluster.StopDir(o.dir)
		if errors.Is(err, cluster.ErrNotRunning) && stopped {
			err = nil
		} else if errors.Is(err, cluster.ErrNotRunning) {
			fmt.Fprintf(os.Stderr, "cluster: nothing running in %s\n", o.dir)
			err = nil
		}
		if err == nil {
			err = os.RemoveAll(o.dir)
		}
		fail(err)
	default:
		fail(fmt.Errorf("unknown command %q: want up or down", os.Args[1]))
	}
}

func up(o upOptions) error {
	dir := o.dir
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver.pid")); err == nil {
		return fmt.Errorf("a control plane already runs in %s; run `make cluster-down` first", dir)
	}
	// Leftovers of a control plane that did not stop cleanly: a node's mounts and cgroups go
	// before its folder does.
	if err := cluster.StopDir(dir); err != nil && !errors.Is(err, cluster.ErrNotRunning) {
		return err
	}
	_ = os.RemoveAll(dir)
	if o.nodes > 1 {
		o.node = true
	}
	tools := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm"}
	if o.node {
		if os.Geteuid() != 0 {
			return errors.New("-node needs root (kubelet and containerd mount, make cgroups and set sysctls)")
		}
		tools = append(append(tools, cluster.NodeTools...), "csi-provisioner")
	}
	bin, err := testenv.Tools(tools...)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Several nodes need this process (the forwarders): everything dies with it.
	opts := cluster.Options{Dir: dir, BinDir: bin, Detach: o.nodes <= 1, AuditPolicy: o.audit, Progress: os.Stderr, Nodes: o.nodes}
	if o.node {
		provisioner := filepath.Join(dir, "images", "csi-provisioner.tar")
		if err := os.MkdirAll(filepath.Dir(provisioner), 0o755); err != nil {
			return err
		}
		if _, err := cluster.WriteProvisionerImage(bin, provisioner); err != nil {
			return fmt.Errorf("external-provisioner image: %w", err)
		}
		workload := filepath.Join(dir, "images", "workload.tar")
		if err := cluster.BuildWorkloadImage(ctx, workload); err != nil {
			return fmt.Errorf("workload image: %w", err)
		}
		opts.Node = &cluster.NodeOptions{Images: append([]string{provisioner, workload}, o.images...)}
	}
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		_ = cluster.StopDir(dir)
		return err
	}
	hint := ""
	if o.node {
		values, err := writeNodeValues(c, o.images)
		if err != nil {
			_ = cluster.StopDir(dir)
			return err
		}
		hint = fmt.Sprintf("cluster: install the chart on the node (helm is in the PATH above):\n"+
			"  helm install shutter deploy/helm/shutter -n shutter-system --create-namespace \\\n"+
			"    -f deploy/helm/shutter/ci/local-node-values.yaml -f %s\n"+
			"cluster: workload image for pods: %s\n", values, cluster.WorkloadImage)
	}
	fmt.Printf("export KUBECONFIG=%s\nexport PATH=%s:$PATH\n", c.Kubeconfig, bin)
	fmt.Fprint(os.Stderr, hint)
	if o.nodes > 1 {
		return foreground(ctx, c)
	}
	return nil
}

// foreground keeps a cluster of several nodes running until a signal, then stops it.
func foreground(ctx context.Context, c *cluster.Cluster) error {
	pidFile := filepath.Join(c.Dir, "up.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = c.Stop()
		return err
	}
	for _, n := range c.Nodes {
		fmt.Fprintf(os.Stderr, "cluster: node %s: network namespace %s, logs in %s\n", n.Name, n.Netns, n.Dir)
	}
	fmt.Fprintln(os.Stderr, "cluster: running; Ctrl-C or `make cluster-down` stops it")
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "cluster: stopping")
	err := c.Stop()
	_ = os.Remove(pidFile)
	return err
}

// stopForeground ends the `up` of a cluster of several nodes, which stops it, and waits; true
// when there was one.
func stopForeground(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "up.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || syscall.Kill(pid, syscall.SIGTERM) != nil {
		return false
	}
	for range 600 {
		if syscall.Kill(pid, 0) != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

func defaultDir() string {
	if d := os.Getenv("SHUTTER_CLUSTER_DIR"); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "shutter", "cluster")
}

func fail(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}
