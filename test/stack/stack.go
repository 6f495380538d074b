// Package stack runs Shutter's three components — snapshot-controller, csi-snapshotter and the
// hostpath driver — as local processes beside a local control plane, authenticated with tokens of
// the ServiceAccounts that the Helm chart created, so that the chart's RBAC is what they run
// with. `make demo` and the end-to-end tests share it. It also holds the helpers both need to
// stand in for the parts a real cluster would have: a CSI client for volumes (there is no
// external-provisioner) and bound PersistentVolume/claim pairs.
package stack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
)

// DefaultDriverName is the hostpath driver's name, as the chart's default classes expect.
const DefaultDriverName = "hostpath.csi.shutter.dev"

// ControllerLease is the snapshot-controller's leader election Lease.
const ControllerLease = "snapshot-controller-leader"

// Options configure a Stack.
type Options struct {
	// Dir is the state folder: the driver's socket and data, kubeconfigs and process logs.
	Dir string
	// BinDir holds snapshot-controller, csi-snapshotter and hostpath-driver (see Build).
	BinDir string
	// Admin is an admin client configuration, used only to request the ServiceAccount tokens.
	Admin *rest.Config
	// Chart is the installed release whose ServiceAccounts the components run as.
	Chart Chart
	// Controllers is the number of snapshot-controller processes (leader election); default 1.
	Controllers int
	// LeaseDuration, RenewDeadline and RetryPeriod time leader election; defaults 8s, 6s, 500ms
	// (a renewal survives a few seconds of a loaded machine; a takeover stays quick).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Verbosity is the components' klog level; default 2.
	Verbosity int
	// ControllerArgs and SnapshotterArgs are extra flags for the snapshot-controllers and the
	// sidecar. They come after the stack's own, so they override them (e.g. --kube-api-qps).
	ControllerArgs, SnapshotterArgs []string
	// ControllerEnv holds extra NAME=value environment pairs for the snapshot-controllers.
	ControllerEnv []string
	// APIServers, when it names a process ("csi-snapshotter", "snapshot-controller-0", ...), is
	// the server address that process's kubeconfig points at instead of the API server (a proxy);
	// each such process then gets a token and kubeconfig of its own.
	APIServers map[string]string
	// SnapshotterSocket is the socket the sidecar dials; default the driver's (Socket).
	SnapshotterSocket string
	// DataDir is the driver's data folder; default Dir/data.
	DataDir string
	// DriverArgs are extra flags for the driver.
	DriverArgs []string
	// ReadyPath is the HTTP path of the sidecar and the controllers that answers 200 once they
	// serve; default /healthz. (Upstream's images serve only /metrics without leader election.)
	ReadyPath string
}

// Stack is the three components running as processes.
type Stack struct {
	opts        Options
	Driver      *Process
	Snapshotter *Process
	Controllers []*Process
	// CSI talks to the driver directly, as the test or demo's own provisioner.
	CSI *CSI
	// Kube and Snapshots are admin clients for the test or demo itself.
	Kube      kubernetes.Interface
	Snapshots clientset.Interface
	// Endpoints are the HTTP endpoints (/metrics, /healthz) by process name.
	Endpoints map[string]string
}

// Socket is the driver's CSI socket.
func (s *Stack) Socket() string { return filepath.Join(s.opts.Dir, "csi.sock") }

// DataDir is the driver's data folder.
func (s *Stack) DataDir() string {
	if s.opts.DataDir != "" {
		return s.opts.DataDir
	}
	return filepath.Join(s.opts.Dir, "data")
}

// Start writes token kubeconfigs for the chart's ServiceAccounts and starts the driver, the
// sidecar and the controllers, returning once the driver answers and every HTTP endpoint is up.
func Start(ctx context.Context, opts Options) (s *Stack, err error) {
	opts = withDefaults(opts)
	s = &Stack{opts: opts, Endpoints: map[string]string{}}
	started := s
	defer func() {
		if err != nil {
			// Stop what was started; s itself is nil on this path.
			started.Stop()
		}
	}()
	if err := os.MkdirAll(s.DataDir(), 0o700); err != nil {
		return nil, err
	}
	if s.Kube, err = kubernetes.NewForConfig(opts.Admin); err != nil {
		return nil, err
	}
	if s.Snapshots, err = clientset.NewForConfig(opts.Admin); err != nil {
		return nil, err
	}
	ns := opts.Chart.Namespace
	controllerKC, snapshotterKC := s.path("snapshot-controller.kubeconfig"), s.path("csi-snapshotter.kubeconfig")
	if err := TokenKubeconfig(ctx, opts.Admin, ns, opts.Chart.ControllerServiceAccount(), controllerKC); err != nil {
		return nil, err
	}
	if err := TokenKubeconfig(ctx, opts.Admin, ns, opts.Chart.HostpathServiceAccount(), snapshotterKC); err != nil {
		return nil, err
	}
	if snapshotterKC, err = s.kubeconfigFor(ctx, "csi-snapshotter", opts.Chart.HostpathServiceAccount(), snapshotterKC); err != nil {
		return nil, err
	}
	ports, err := freePorts(2 + opts.Controllers)
	if err != nil {
		return nil, err
	}
	if err := s.startDriver(ctx, endpoint(ports[1+opts.Controllers])); err != nil {
		return nil, err
	}
	csiAddress := s.Socket()
	if opts.SnapshotterSocket != "" {
		csiAddress = opts.SnapshotterSocket
	}
	s.Snapshotter = s.process("csi-snapshotter", "--csi-address="+csiAddress, "--kubeconfig="+snapshotterKC,
		"--http-endpoint="+endpoint(ports[0]), "--timeout=30s", "--worker-threads=4",
		"--retry-interval-start=200ms", "--retry-interval-max=5s",
		// The sidecar's reference defaults (5/10) would make a batch of 50 take a minute.
		"--kube-api-qps=100", "--kube-api-burst=200")
	s.Snapshotter.Args = append(s.Snapshotter.Args, opts.SnapshotterArgs...)
	s.Endpoints[s.Snapshotter.Name] = endpoint(ports[0])
	for i := range opts.Controllers {
		name := "snapshot-controller"
		if opts.Controllers > 1 {
			name += "-" + strconv.Itoa(i)
		}
		kc, err := s.kubeconfigFor(ctx, name, opts.Chart.ControllerServiceAccount(), controllerKC)
		if err != nil {
			return nil, err
		}
		s.Controllers = append(s.Controllers, s.process(name, append([]string{
			"--kubeconfig=" + kc, "--http-endpoint=" + endpoint(ports[1+i]),
			"--retry-interval-start=200ms", "--retry-interval-max=5s",
		}, append(s.leaderElectionArgs(), opts.ControllerArgs...)...)...))
		s.Controllers[i].Env = opts.ControllerEnv
		s.Endpoints[name] = endpoint(ports[1+i])
	}
	for i, p := range append([]*Process{s.Snapshotter}, s.Controllers...) {
		if err := p.Start(); err != nil {
			return nil, err
		}
		if err := waitHTTP(ctx, p, "http://"+endpoint(ports[i])+opts.ReadyPath); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func withDefaults(o Options) Options {
	if o.Controllers <= 0 {
		o.Controllers = 1
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 8*time.Second, 6*time.Second, 500*time.Millisecond
	}
	if o.Verbosity == 0 {
		o.Verbosity = 2
	}
	if o.ReadyPath == "" {
		o.ReadyPath = "/healthz"
	}
	return o
}

func (s *Stack) path(name string) string { return filepath.Join(s.opts.Dir, name) }

func (s *Stack) process(name string, args ...string) *Process {
	bin := strings.TrimRightFunc(name, func(r rune) bool { return r == '-' || r >= '0' && r <= '9' })
	return &Process{Name: name, Path: filepath.Join(s.opts.BinDir, bin), Dir: s.opts.Dir,
		Args: append(args, "--v="+strconv.Itoa(s.opts.Verbosity))}
}

func (s *Stack) leaderElectionArgs() []string {
	return []string{"--leader-election", "--leader-election-namespace=" + s.opts.Chart.Namespace,
		"--leader-election-lease-duration=" + s.opts.LeaseDuration.String(),
		"--leader-election-renew-deadline=" + s.opts.RenewDeadline.String(),
		"--leader-election-retry-period=" + s.opts.RetryPeriod.String()}
}

// kubeconfigFor is the kubeconfig of process name: its own, pointing at opts.APIServers[name],
// when that is set, otherwise shared.
func (s *Stack) kubeconfigFor(ctx context.Context, name, serviceAccount, shared string) (string, error) {
	server, ok := s.opts.APIServers[name]
	if !ok {
		return shared, nil
	}
	path := s.path(name + ".kubeconfig")
	return path, TokenKubeconfigAt(ctx, s.opts.Admin, s.opts.Chart.Namespace, serviceAccount, path, server)
}

func (s *Stack) startDriver(ctx context.Context, httpEndpoint string) error {
	s.Driver = s.process("hostpath-driver", append([]string{"--endpoint=unix://" + s.Socket(), "--nodeid=shutter-local",
		"--drivername=" + DefaultDriverName, "--datadir=" + s.DataDir(), "--fsync=false",
		"--http-endpoint=" + httpEndpoint}, s.opts.DriverArgs...)...)
	s.Endpoints[s.Driver.Name] = httpEndpoint
	if err := s.Driver.Start(); err != nil {
		return err
	}
	var err error
	if s.CSI, err = DialCSI(s.Socket(), s.DataDir()); err != nil {
		return err
	}
	return s.WaitDriver(ctx)
}

// WaitDriver waits until the driver answers a probe, e.g. after a restart.
func (s *Stack) WaitDriver(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := s.Driver.Exited(); err != nil {
			return false, err
		}
		return s.CSI.Probe(ctx) == nil, nil
	})
}

// Processes are all the component processes.
func (s *Stack) Processes() []*Process {
	return append([]*Process{s.Driver, s.Snapshotter}, s.Controllers...)
}

// Check returns an error when a component that should run has exited.
func (s *Stack) Check() error {
	for _, p := range s.Processes() {
		if p == nil {
			continue
		}
		if err := p.Exited(); err != nil {
			return err
		}
	}
	return nil
}

// Stop ends every component (SIGTERM, then SIGKILL after 5 s) and closes the CSI connection.
func (s *Stack) Stop() {
	for _, p := range s.Processes() {
		if p != nil {
			p.Stop(5 * time.Second)
		}
	}
	if s.CSI != nil {
		s.CSI.Close()
	}
}

// Leader returns the snapshot-controller process that holds the Lease, or nil.
func (s *Stack) Leader(ctx context.Context) (*Process, error) {
	lease, err := s.Kube.CoordinationV1().Leases(s.opts.Chart.Namespace).Get(ctx, ControllerLease, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return s.holder(lease), nil
}

func (s *Stack) holder(lease *coordinationv1.Lease) *Process {
	if lease.Spec.HolderIdentity == nil {
		return nil
	}
	id := *lease.Spec.HolderIdentity
	for _, p := range s.Controllers {
		if pid := p.Pid(); pid != 0 && strings.HasSuffix(id, "_"+strconv.Itoa(pid)) {
			return p
		}
	}
	return nil
}

// WaitLeader waits until a running controller other than not holds the Lease, and returns it.
func (s *Stack) WaitLeader(ctx context.Context, not *Process, timeout time.Duration) (*Process, error) {
	var leader *Process
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := s.Leader(ctx)
		if err != nil {
			return false, nil
		}
		leader = p
		return p != nil && p != not, nil
	})
	return leader, err
}

func endpoint(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitHTTP waits until url answers 200 while p runs.
func waitHTTP(ctx context.Context, p *Process, url string) error {
	client := &http.Client{Timeout: time.Second}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := p.Exited(); err != nil {
			return false, err
		}
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not serve %s: %w\n%s", p.Name, url, err, p.Tail(20))
	}
	return nil
}
