package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/internal/syncset"
	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

const (
	namespace = "shutter-chaos"
	// leaseDuration is the controllers' Lease duration; a stopped leader is held past it.
	leaseDuration = 8 * time.Second
	// diskSize is the tmpfs under the driver's data folder, filled by the disk-full fault.
	diskSize = 256 << 20
)

// env is the control plane, the proxies and the components of one run.
type env struct {
	dir     string
	keep    bool
	log     func(format string, args ...any)
	cluster *cluster.Cluster
	stack   *stack.Stack
	api     *apiProxy
	csi     *csiProxy
	kube    kubernetes.Interface
	snaps   clientset.Interface
	// disk is the tmpfs mount point, empty when the run is not root.
	disk string

	// paused are processes the faults hold down; the supervisor leaves them alone.
	paused syncset.Set[*stack.Process]
	stop   context.CancelFunc
	done   chan struct{}
}

// setUp builds and starts everything: control plane with an audit log, chart, API proxy, CSI
// proxy, the driver on a tmpfs (as root), two controllers and a sidecar.
func setUp(ctx context.Context, e *env) (err error) {
	if e.dir, err = os.MkdirTemp("", "shutter-chaos-"); err != nil {
		return err
	}
	tools, err := testenv.Tools("etcd", "kube-apiserver", "kube-controller-manager", "helm")
	if err != nil {
		return err
	}
	bin := filepath.Join(e.dir, "bin")
	e.log("build the components")
	if err := stack.Build(ctx, testenv.RepoRoot(), bin); err != nil {
		return err
	}
	policy := filepath.Join(e.dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return err
	}
	e.log("start the control plane")
	if e.cluster, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(e.dir, "cluster"), BinDir: tools,
		AuditPolicy: policy, APIServerArgs: []string{"--audit-log-maxsize=100000", "--audit-log-batch-buffer-size=100000"}}); err != nil {
		return err
	}
	cfg := rest.CopyConfig(e.cluster.Config)
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cfg.UserAgent = "shutter-chaos"
	if e.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if e.snaps, err = clientset.NewForConfig(cfg); err != nil {
		return err
	}
	chart := stack.Chart{Helm: filepath.Join(tools, "helm"), Dir: filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter"),
		Release: "shutter", Namespace: "shutter-system", Set: []string{"hostpath.driver.privileged=false", "hostpath.snapshotter.readSecrets=true"}}
	e.log("install the chart")
	if err := chart.Install(ctx, e.cluster.Kubeconfig); err != nil {
		return err
	}
	return e.startStack(ctx, bin, chart)
}

func (e *env) startStack(ctx context.Context, bin string, chart stack.Chart) (err error) {
	cdir := e.cluster.Dir
	if e.api, err = newAPIProxy(e.cluster.URL, filepath.Join(cdir, "ca.crt"), filepath.Join(cdir, "apiserver.crt"),
		filepath.Join(cdir, "apiserver.key")); err != nil {
		return err
	}
	servers := map[string]string{}
	for _, name := range []string{"csi-snapshotter", "snapshot-controller-0", "snapshot-controller-1"} {
		if servers[name], err = e.api.listen(name); err != nil {
			return err
		}
	}
	stackDir := filepath.Join(e.dir, "stack")
	dataDir := filepath.Join(stackDir, "data")
	if os.Geteuid() == 0 {
		e.disk = filepath.Join(e.dir, "disk")
		if err := os.MkdirAll(e.disk, 0o700); err != nil {
			return err
		}
		if err := syscall.Mount("tmpfs", e.disk, "tmpfs", 0, "size="+strconv.Itoa(diskSize)); err != nil {
			e.log("no tmpfs for the driver (%v): the disk-full fault is skipped", err)
			e.disk = ""
		} else {
			dataDir = filepath.Join(e.disk, "data")
		}
	}
	if err := os.MkdirAll(stackDir, 0o700); err != nil {
		return err
	}
	proxySocket := filepath.Join(stackDir, "csi-proxy.sock")
	if e.csi, err = newCSIProxy(proxySocket, filepath.Join(stackDir, "csi.sock")); err != nil {
		return err
	}
	e.log("start the driver, the sidecar and two controllers")
	e.stack, err = stack.Start(ctx, stack.Options{Dir: stackDir, BinDir: bin, Admin: e.cluster.Config, Chart: chart,
		Controllers: 2, LeaseDuration: leaseDuration, RenewDeadline: 6 * time.Second, RetryPeriod: 500 * time.Millisecond,
		APIServers: servers, SnapshotterSocket: proxySocket, DataDir: dataDir,
		SnapshotterArgs: []string{"--timeout=10s"},
		DriverArgs:      []string{"--capacity=1099511627776"}})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.stop, e.done = cancel, make(chan struct{})
	go e.supervise(sctx)
	return nil
}

// supervise starts again every component that exited and is not held down, as a kubelet would.
func (e *env) supervise(ctx context.Context) {
	defer close(e.done)
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, p := range e.stack.Processes() {
			if e.paused.Has(p) || p.Running() {
				continue
			}
			if err := p.Start(); err != nil {
				e.log("restart %s: %v", p.Name, err)
			}
		}
	}
}

// hold keeps the supervisor from restarting p until release.
func (e *env) hold(p *stack.Process, on bool) {
	if on {
		e.paused.Add(p)
	} else {
		e.paused.Remove(p)
	}
}

// allRunning waits until every component runs and the driver answers.
func (e *env) allRunning(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ok := true
		for _, p := range e.stack.Processes() {
			ok = ok && p.Running()
		}
		if ok && e.stack.CSI.Probe(ctx) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("components not all running after 2m")
}

// tearDown stops everything started, unmounts the tmpfs and removes the state folder unless kept.
func (e *env) tearDown() {
	if e.stop != nil {
		e.stop()
		<-e.done
	}
	if e.stack != nil {
		for _, p := range e.stack.Processes() {
			if pid := p.Pid(); pid != 0 {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
		e.stack.Stop()
	}
	if e.csi != nil {
		e.csi.close()
	}
	if e.api != nil {
		e.api.close()
	}
	if e.cluster != nil {
		e.cluster.Stop()
	}
	if e.disk != "" {
		if err := syscall.Unmount(e.disk, 0); err != nil {
			_ = syscall.Unmount(e.disk, syscall.MNT_DETACH)
		}
	}
	if e.dir == "" {
		return
	}
	if e.keep {
		e.log("state and logs kept in %s", e.dir)
		return
	}
	_ = os.RemoveAll(e.dir)
}

// auditPolicy logs every request at Metadata level once, when it completes.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
`
