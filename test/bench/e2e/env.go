package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/sidecar"
	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

const (
	namespace      = "shutter-bench"
	benchUserAgent = "shutter-bench-e2e"
	// adminUser is the common name of test/cluster's admin certificate.
	adminUser = "shutter-admin"
)

// bench holds the environment the runs share.
type bench struct {
	opts     options
	dir      string
	tools    string
	cluster  *cluster.Cluster
	chart    stack.Chart
	stack    *stack.Stack
	kube     kubernetes.Interface
	snaps    clientset.Interface
	audit    auditLog
	tracker  *tracker
	cancel   context.CancelFunc
	warnings []string
	// handles are the claims' volume handles, by claim index.
	handles []string
	// controllerUser and sidecarUser are the ServiceAccount user names of the components.
	controllerUser, sidecarUser string
}

// setUp builds the components, starts the control plane, installs the chart, starts the
// components and binds the claims.
func (b *bench) setUp(ctx context.Context) (err error) {
	if b.dir, err = os.MkdirTemp("", "shutter-bench-e2e-"); err != nil {
		return err
	}
	b.progress("state folder %s", b.dir)
	b.progress("control-plane binaries and helm (cached after the first build)")
	if b.tools, err = testenv.Tools("etcd", "kube-apiserver", "kube-controller-manager", "helm"); err != nil {
		return err
	}
	bin := filepath.Join(b.dir, "bin")
	b.progress("build snapshot-controller, csi-snapshotter, hostpath-driver")
	if err := stack.Build(ctx, testenv.RepoRoot(), bin); err != nil {
		return err
	}
	if b.opts.upstream {
		if err := useUpstream(bin); err != nil {
			return err
		}
	}
	if err := b.startCluster(ctx); err != nil {
		return err
	}
	if err := b.startStack(ctx, bin); err != nil {
		return err
	}
	claims := b.opts.claims
	if claims == 0 {
		claims = b.opts.n
	}
	if b.opts.scale {
		claims += b.opts.runs // one more claim per run for the snapshot after the restart
	}
	b.progress("create %d driver volumes with bound PersistentVolumes and claims", claims)
	start := time.Now()
	if err := b.createClaims(ctx, claims); err != nil {
		return err
	}
	b.progress("%d claims bound in %.1fs; waiting until kube-controller-manager is done with them", claims, time.Since(start).Seconds())
	if err := b.waitQuiet(ctx, compKCM, 3*time.Second); err != nil {
		return err
	}
	tctx, cancel := context.WithCancel(ctx)
	b.cancel = cancel
	b.tracker, err = newTracker(tctx, b.snaps, namespace)
	return err
}

func (b *bench) startCluster(ctx context.Context) error {
	policy := filepath.Join(b.dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return err
	}
	c, err := cluster.Start(ctx, cluster.Options{Dir: filepath.Join(b.dir, "cluster"), BinDir: b.tools,
		AuditPolicy: policy, Progress: os.Stderr,
		// The chart's driver pod is privileged; a large audit buffer so that bursts drop nothing,
		// and no rotation of the audit log (the API server rotates at 100 MB unless told, which
		// 5,000 snapshots pass: the delete phase then counted no writes).
		APIServerArgs: []string{"--allow-privileged=true", "--audit-log-batch-buffer-size=200000", "--audit-log-maxsize=100000"},
		// etcd's default 2 GiB quota is near what 50,000 snapshots and contents with their history
		// between compactions take.
		EtcdArgs: []string{"--quota-backend-bytes=8589934592"}})
	if err != nil {
		return err
	}
	b.cluster = c
	b.audit = auditLog{path: filepath.Join(c.Dir, "audit.log")}
	cfg := rest.CopyConfig(c.Config)
	// The benchmark's own client is never throttled: it plays many users at once.
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cfg.UserAgent = benchUserAgent
	if b.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	b.snaps, err = clientset.NewForConfig(cfg)
	return err
}

func (b *bench) startStack(ctx context.Context, bin string) error {
	b.chart = stack.Chart{Helm: filepath.Join(b.tools, "helm"), Dir: filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter"),
		Release: "shutter", Namespace: "shutter-system"}
	b.progress("helm install the chart")
	if err := b.chart.Install(ctx, b.cluster.Kubeconfig); err != nil {
		return err
	}
	if b.opts.upstream {
		if err := b.grantUpstream(ctx); err != nil {
			return err
		}
	}
	sa := "system:serviceaccount:" + b.chart.Namespace + ":"
	b.controllerUser, b.sidecarUser = sa+b.chart.ControllerServiceAccount(), sa+b.chart.HostpathServiceAccount()
	b.progress("start the components (controller %v, sidecar %v)", b.controllerArgs(), b.sidecarArgs())
	s, err := stack.Start(ctx, stack.Options{Dir: filepath.Join(b.dir, "stack"), BinDir: bin,
		Admin: b.cluster.Config, Chart: b.chart, Verbosity: b.opts.verbosity,
		// The chart's leader election timing, so that Lease renewals are as in a cluster.
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 5 * time.Second,
		ControllerArgs: b.controllerArgs(), SnapshotterArgs: b.sidecarArgs(), ControllerEnv: b.opts.controllerEnv,
		ReadyPath: b.readyPath()})
	if err != nil {
		return err
	}
	b.stack = s
	_, err = b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	return err
}

// Upstream's binaries in the tool cache (hack/build-tools.sh builds them from their module).
const (
	upstreamController = "upstream-snapshot-controller"
	upstreamSidecar    = "upstream-csi-snapshotter"
)

// useUpstream replaces snapshot-controller and csi-snapshotter in bin with upstream's, so that
// test/stack runs them with the same flags, ServiceAccounts and driver.
func useUpstream(bin string) error {
	tools, err := testenv.Tools(upstreamController, upstreamSidecar)
	if err != nil {
		return err
	}
	for name, tool := range map[string]string{"snapshot-controller": upstreamController, "csi-snapshotter": upstreamSidecar} {
		path := filepath.Join(bin, name)
		if err := os.Remove(path); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join(tools, tool), path); err != nil {
			return err
		}
	}
	return nil
}

// readyPath is the components' path that answers once they serve: upstream's serve only
// /metrics.
func (b *bench) readyPath() string {
	if b.opts.upstream {
		return "/metrics"
	}
	return "/healthz"
}

// controllerArgs are the chart's defaults where test/stack picks faster ones for tests, and
// the QPS flags when asked for.
func (b *bench) controllerArgs() []string {
	args := []string{"--retry-interval-start=1s", "--retry-interval-max=5m"}
	args = append(args, b.qpsArgs()...)
	return append(args, b.opts.controllerFlags...)
}

// sidecarArgs are the chart's and the binary's defaults (test/stack speeds the sidecar up for
// tests), with the QPS flags when asked for.
func (b *bench) sidecarArgs() []string {
	d := sidecar.DefaultOptions()
	args := []string{"--worker-threads=10", "--timeout=" + d.Timeout.String(),
		"--retry-interval-start=" + d.RetryIntervalStart.String(), "--retry-interval-max=" + d.RetryIntervalMax.String()}
	if b.opts.qps == 0 && b.opts.burst == 0 {
		return append(args, "--kube-api-qps="+strconv.FormatFloat(d.Client.QPS, 'g', -1, 64),
			"--kube-api-burst="+strconv.Itoa(d.Client.Burst))
	}
	return append(args, b.qpsArgs()...)
}

func (b *bench) qpsArgs() []string {
	var args []string
	if b.opts.qps != 0 {
		args = append(args, "--kube-api-qps="+strconv.FormatFloat(b.opts.qps, 'g', -1, 64))
	}
	if b.opts.burst != 0 {
		args = append(args, "--kube-api-burst="+strconv.Itoa(b.opts.burst))
	}
	return args
}

// pids are the processes whose CPU time is measured, by name.
func (b *bench) pids() map[string]int {
	out := map[string]int{"bench": os.Getpid()}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		data, err := os.ReadFile(filepath.Join(b.cluster.Dir, name+".pid"))
		if pid, perr := strconv.Atoi(string(bytes.TrimSpace(data))); err == nil && perr == nil {
			out[name] = pid
		}
	}
	for _, p := range b.stack.Processes() {
		if pid := p.Pid(); pid != 0 {
			out[p.Name] = pid
		}
	}
	return out
}

func (b *bench) machine() map[string]any {
	host, _ := os.Hostname()
	data, _ := os.ReadFile("/proc/loadavg")
	return map[string]any{"host": host, "cpus": runtime.NumCPU(), "go": runtime.Version(),
		"loadavgAtStart": string(bytes.TrimSpace(data))}
}

// cleanup stops everything and removes the state folder unless asked to keep it.
func (b *bench) cleanup() {
	if b.cancel != nil {
		b.cancel()
	}
	if b.stack != nil {
		b.stack.Stop()
	}
	if b.cluster != nil {
		b.cluster.Stop()
	}
	if b.dir == "" {
		return
	}
	if b.opts.keep {
		b.progress("state, logs and audit log kept in %s", b.dir)
		return
	}
	if err := os.RemoveAll(b.dir); err != nil {
		b.progress("remove %s: %v", b.dir, err)
	}
}

// waitQuiet waits until component has made no write for quiet, so that setup work (the PV
// controller looking at every new claim) does not spill into a measured phase.
func (b *bench) waitQuiet(ctx context.Context, component string, quiet time.Duration) error {
	pos := b.audit.size()
	last := time.Now()
	return b.waitFor(ctx, "quiet", 5*time.Minute, func() (bool, string) {
		end := b.audit.size()
		_ = b.audit.read(pos, func(e *auditEvent) {
			if writeVerbs[e.Verb] && classify(e, b.controllerUser, b.sidecarUser, adminUser) == component {
				last = time.Now()
			}
		})
		pos = end
		return time.Since(last) > quiet, fmt.Sprintf("%s wrote %.1fs ago", component, time.Since(last).Seconds())
	})
}
