// Package app holds what both of Shutter's long-running components do around their reconcilers:
// the API client configuration, leader election on a Lease, and the HTTP endpoint with /metrics
// and health checks. Each cmd/ main parses flags into an Options struct and calls its package's
// Run, which uses these.
package app

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// ClientOptions configure the connection to the API server.
type ClientOptions struct {
	Kubeconfig string
	QPS        float64
	Burst      int
	// Compression asks the API server to gzip its responses.
	Compression bool
}

// AddFlags registers --kubeconfig, --kube-api-qps and --kube-api-burst with the given defaults.
func (o *ClientOptions) AddFlags(fs *flag.FlagSet, qps float64, burst int) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster configuration.")
	fs.Float64Var(&o.QPS, "kube-api-qps", qps, "Queries per second to the API server, for each of this component's API clients separately: the snapshot-controller has five (claims, events, snapshot kinds, content kinds, the Lease), the csi-snapshotter two (Kubernetes objects, content kinds).")
	fs.IntVar(&o.Burst, "kube-api-burst", burst, "Burst of queries to the API server above --kube-api-qps.")
	fs.BoolVar(&o.Compression, "kube-api-compression", false, "Ask the API server to gzip its responses. Off: next to the API server, compressing the first lists of thousands of objects costs the server and this component more CPU than the transfer it saves; turn it on for an API server behind a slow link.")
}

// Config builds the client configuration.
func (o ClientOptions) Config(userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("API client configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.QPS), o.Burst
	cfg.DisableCompression = !o.Compression
	cfg.UserAgent = userAgent
	return cfg, nil
}

// Protobuf returns a copy of cfg that talks protobuf instead of JSON. The API server encodes
// and decodes protobuf for a fraction of JSON's CPU, and the client's informer caches decode it
// with less garbage. Only built-in kinds speak it: use it for the Kubernetes clientset, never
// for the snapshot clientsets (custom resources are JSON only).
func Protobuf(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.ContentType = apiruntime.ContentTypeProtobuf
	out.AcceptContentTypes = apiruntime.ContentTypeProtobuf + "," + apiruntime.ContentTypeJSON
	return out
}

// LeaderElectionOptions configure leader election on a coordination.k8s.io Lease.
type LeaderElectionOptions struct {
	Enabled                                   bool
	Namespace                                 string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Labels are set on the Lease while this replica leads (--leader-election-labels).
	Labels map[string]string
}

// AddFlags registers the --leader-election flags.
func (o *LeaderElectionOptions) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Enabled, "leader-election", false, "Run only while holding a Lease, so several replicas can run for availability.")
	fs.StringVar(&o.Namespace, "leader-election-namespace", "", "Namespace of the Lease; empty means this pod's namespace.")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a Lease holds without renewal before another replica may take it.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader keeps retrying to renew before it gives up leadership.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", 5*time.Second, "How often replicas try to take or renew the Lease.")
	fs.Var(leaseLabels{&o.Labels}, "leader-election-labels", "Labels set on the Lease while this replica leads: a comma-separated list of key:value pairs, e.g. 'team:storage,tier:one'.")
}

// leaseLabels is the --leader-election-labels flag: key:value pairs separated by commas.
type leaseLabels struct{ m *map[string]string }

func (l leaseLabels) String() string {
	if l.m == nil || len(*l.m) == 0 {
		return ""
	}
	var pairs []string
	for k, v := range *l.m {
		pairs = append(pairs, k+":"+v)
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

func (l leaseLabels) Set(value string) error {
	if *l.m == nil {
		*l.m = map[string]string{}
	}
	for _, item := range strings.Split(value, ",") {
		k, v, ok := strings.Cut(item, ":")
		if !ok || strings.Contains(v, ":") {
			return fmt.Errorf("malformed item in list of labels: %s", item)
		}
		(*l.m)[k] = v
	}
	return nil
}

// Elector runs a function while this process holds the Lease. Its Check is the
// /healthz/leader-election check.
type Elector struct {
	opts     LeaderElectionOptions
	name     string
	watchdog *leaderelection.HealthzAdaptor
	// le is the running election, nil before Run; fresh tells whether this process leads with
	// a recent renewal (a field so tests can swap it).
	le    atomic.Pointer[leaderelection.LeaderElector]
	fresh func() bool
	// predecessors are Leases of older releases that must lapse before run starts (After).
	predecessors []string
}

// NewElector prepares leader election on the Lease named name.
func NewElector(opts LeaderElectionOptions, name string) *Elector {
	e := &Elector{opts: opts, name: name, watchdog: leaderelection.NewLeaderHealthzAdaptor(opts.RenewDeadline)}
	e.fresh = e.leadsFreshly
	return e
}

// leadsFreshly tells whether this process holds the Lease and renewed it (or saw it renewed)
// less than RenewDeadline ago, that is at least LeaseDuration-RenewDeadline before any other
// replica may consider it expired.
func (e *Elector) leadsFreshly() bool {
	le := e.le.Load()
	return le != nil && le.IsLeader() && le.Check(e.opts.RenewDeadline-e.opts.LeaseDuration) == nil
}

// Fenced returns a copy of cfg whose writes (POST, PUT, PATCH, DELETE) fail at once, without
// reaching the API server, unless this process leads freshly. A leader that was paused (a
// stopped process, a frozen VM) past its Lease resumes with its work under way: its renewal
// loop needs a round trip to find out that another replica leads, and meanwhile its workers
// would write over the new leader's decisions. Give the Lease client cfg itself, never this.
// Without leader election cfg is returned as is.
func (e *Elector) Fenced(cfg *rest.Config) *rest.Config {
	if !e.opts.Enabled {
		return cfg
	}
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &fence{next: rt, fresh: func() bool { return e.fresh() }}
	})
	return out
}

// fence is the RoundTripper of Fenced.
type fence struct {
	next  http.RoundTripper
	fresh func() bool
}

// ErrNotLeading is the error of a write that Fenced refused.
var ErrNotLeading = errors.New("write refused: this replica does not hold a fresh leader election Lease")

// LeaseCheckedHeader carries, on each write that Fenced let through, the time (Unix nanoseconds)
// at which the Lease was found fresh. A process frozen right after that check sends the write
// only when it resumes, possibly after another replica took over; this header tells such a
// late write from one decided without leading (the chaos suite's audit check reads it).
const LeaseCheckedHeader = "Shutter-Lease-Checked"

func (f *fence) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		checked := time.Now()
		if !f.fresh() {
			return nil, ErrNotLeading
		}
		req = req.Clone(req.Context()) // a RoundTripper leaves the caller's request as it is
		req.Header.Set(LeaseCheckedHeader, strconv.FormatInt(checked.UnixNano(), 10))
	}
	return f.next.RoundTrip(req)
}

// Check is the health check, served at /healthz/leader-election, that fails when the leader
// stopped renewing its Lease.
func (e *Elector) Check() HealthCheck {
	return HealthCheck{Name: "leader-election", Check: e.watchdog.Check}
}

// Run calls run while leading, or at once when leader election is off. It returns when ctx is
// done and run has returned. When ctx ends, run's context ends too, but the Lease is renewed
// until run has returned and only then handed back (so that no other replica starts while
// this one finishes its work under way). When the Lease is lost, run's context ends and Run
// returns at once with an error: the caller must exit.
func (e *Elector) Run(ctx context.Context, cs kubernetes.Interface, run func(ctx context.Context)) error {
	if !e.opts.Enabled {
		run(ctx)
		return nil
	}
	logger := klog.FromContext(ctx)
	id, err := leaderIdentity()
	if err != nil {
		return err
	}
	ns := e.opts.Namespace
	if ns == "" {
		ns = inClusterNamespace()
	}
	lock, err := resourcelock.NewWithLabels(resourcelock.LeasesResourceLock, ns, e.name, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id}, e.opts.Labels)
	if err != nil {
		return err
	}
	// election outlives ctx while run finishes; it ends when run has returned, or at once
	// when ctx ends before this replica leads.
	election, endElection := context.WithCancel(context.WithoutCancel(ctx))
	defer endElection()
	var leading atomic.Bool
	stopWaiting := context.AfterFunc(ctx, func() {
		if !leading.Load() {
			endElection()
		}
	})
	defer stopWaiting()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &ownReleaseLock{Interface: lock}, Name: e.name, ReleaseOnCancel: true, WatchDog: e.watchdog,
		LeaseDuration: e.opts.LeaseDuration, RenewDeadline: e.opts.RenewDeadline, RetryPeriod: e.opts.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				leading.Store(true)
				defer endElection() // hand the Lease back once the work under way is done
				logger.Info("Became leader", "lease", klog.KRef(ns, e.name), "identity", id)
				runCtx, cancel := context.WithCancel(leaderCtx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				if e.awaitPredecessors(runCtx, cs, ns, id) {
					run(runCtx)
				}
			},
			OnStoppedLeading: func() { logger.Info("Stopped leading", "lease", klog.KRef(ns, e.name)) },
			OnNewLeader: func(leader string) {
				if leader != id {
					logger.Info("Another replica leads", "leader", leader)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	e.watchdog.SetLeaderElection(le)
	e.le.Store(le)
	le.Run(election)
	if ctx.Err() == nil {
		return errors.New("lost leadership")
	}
	return nil
}

func inClusterNamespace() string {
	data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil || len(data) == 0 {
		return "default"
	}
	return string(data)
}

// Registry is the Prometheus registry the components register their metrics with; it carries
// the Go and process collectors.
func Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// HTTPOptions configure the HTTP endpoint of a component.
type HTTPOptions struct {
	// Endpoint is the address served; empty serves nothing.
	Endpoint string
	// MetricsAddress is upstream's deprecated --metrics-address: Endpoint's other name; at most
	// one of the two may be set. Complete folds it into Endpoint.
	MetricsAddress string
	// MetricsPath is the path of the metrics; empty means /metrics.
	MetricsPath string
	// Profiling also serves Go's profiles at /debug/pprof/.
	Profiling bool
}

// AddFlags registers --http-endpoint (with the given help text) and --profiling.
func (o *HTTPOptions) AddFlags(fs *flag.FlagSet, endpointHelp string) {
	fs.StringVar(&o.Endpoint, "http-endpoint", "", endpointHelp)
	fs.BoolVar(&o.Profiling, "profiling", false, "Also serve Go's CPU, heap and goroutine profiles at /debug/pprof/ on --http-endpoint.")
}

// AddMetricsFlags registers the upstream sidecars' --metrics-address and --metrics-path; call
// Complete after parsing.
func (o *HTTPOptions) AddMetricsFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MetricsAddress, "metrics-address", "", "(deprecated) Another name of --http-endpoint; only one of the two can be set.")
	fs.StringVar(&o.MetricsPath, "metrics-path", "/metrics", "The HTTP path where the Prometheus metrics are served.")
}

// Complete checks the flags and folds --metrics-address into Endpoint.
func (o *HTTPOptions) Complete() error {
	if o.MetricsAddress != "" {
		if o.Endpoint != "" {
			return errors.New("only one of --metrics-address and --http-endpoint can be set")
		}
		o.Endpoint, o.MetricsAddress = o.MetricsAddress, ""
	}
	if o.MetricsPath != "" && !strings.HasPrefix(o.MetricsPath, "/") {
		return fmt.Errorf("--metrics-path %q must start with /", o.MetricsPath)
	}
	return nil
}

// ServeHTTP serves /metrics (or MetricsPath) from reg unless reg is nil, /healthz and
// /healthz/<check> (and the profiles when asked) until ctx is done.
func ServeHTTP(ctx context.Context, opts HTTPOptions, reg prometheus.Gatherer, checks ...HealthCheck) error {
	addr := opts.Endpoint
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	if reg != nil {
		path := opts.MetricsPath
		if path == "" {
			path = "/metrics"
		}
		mux.Handle(path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	}
	InstallHealthChecks(mux, checks...)
	if opts.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.ListenAndServe() }()
	klog.FromContext(ctx).Info("Serving metrics and health checks", "address", addr)
	select {
	case err := <-errCh:
		return fmt.Errorf("HTTP endpoint %s: %w", addr, err)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	}
}

// DefaultGCPercent is the garbage collector's target (GOGC) of Shutter's components when the
// GOGC environment variable is not set. The live heap of a controller is small and the garbage
// of a burst of snapshots large, so collecting at +50% instead of Go's +100% lowers peak memory
// by about a tenth for a few percent more CPU (make bench-e2e).
const DefaultGCPercent = 50

// SyncGCPercent is the garbage collector's target while the informers take their first lists.
// A list holds every object of its kind twice for a moment (as listed, then as cached, trimmed),
// so with thousands of objects the peak memory of a restart is set then; collecting at +20%
// instead of +50% for that second keeps the peak lower for a little CPU.
const SyncGCPercent = 20

// LowerGCWhileSyncing sets the collector's target to SyncGCPercent, unless it is lower already
// or off, and returns the function that sets it back; call that once the caches are synced.
func LowerGCWhileSyncing() (restore func()) {
	old := debug.SetGCPercent(SyncGCPercent)
	if old < 0 || old <= SyncGCPercent {
		debug.SetGCPercent(old)
		return func() {}
	}
	return sync.OnceFunc(func() { debug.SetGCPercent(old) })
}

// TuneRuntime applies DefaultGCPercent unless GOGC is set, and turns the heap profile's
// sampling off unless profiling is served: its hash table of call stacks would otherwise grow
// by a page of memory per sample for a profile nobody can fetch.
func TuneRuntime(profiling bool) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
	if !profiling {
		runtime.MemProfileRate = 0
	}
}

// watchListEnv is the variable with which client-go lets a user choose streaming lists.
const watchListEnv = "KUBE_FEATURE_" + string(clientfeatures.WatchListClient)

// PreferListResponses makes informers fetch their first state with one LIST response rather than
// a stream of watch events (client-go's WatchListClient), unless the user chose with
// KUBE_FEATURE_WatchListClient. Streaming keeps a huge list from being held in memory at once,
// but with 5,000 snapshots (20,000 objects over four informers) the caches took about twice as
// long to sync that way, and that is how long a new snapshot waits after a restart. Call it
// before any client is made.
func PreferListResponses() {
	if _, set := os.LookupEnv(watchListEnv); set {
		return
	}
	clientfeatures.ReplaceFeatureGates(noWatchList{clientfeatures.FeatureGates()})
}

// noWatchList reports WatchListClient off and every other gate as gates does.
type noWatchList struct{ gates clientfeatures.Gates }

func (g noWatchList) Enabled(key clientfeatures.Feature) bool {
	return key != clientfeatures.WatchListClient && g.gates.Enabled(key)
}

// leaderIdentity is this process's holder identity in the Lease: host name, a random part and
// the process id. Host name and pid alone are not unique: every container's process is pid 1,
// and pods in the node's network namespace (hostNetwork) share the node's host name, so two
// replicas on one node would both hold the Lease. The pid stays last (tests match on it).
func leaderIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s_%s_%d", host, rand.Text()[:8], os.Getpid()), nil
}
