// Package sidecar is csi-snapshotter: it runs next to a CSI driver and turns the
// VolumeSnapshotContents and VolumeGroupSnapshotContents of that driver into CSI calls, following
// the public protocol between a snapshot controller and a snapshotter sidecar.
package sidecar

import (
	"context"
	"strings"
	"sync"
	"time"

	csimetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/client/clientset/versioned/scheme"
	"github.com/shutter-csi/shutter/pkg/app"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/csi"
	names "github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Options configure the sidecar; cmd/csi-snapshotter fills them from flags.
type Options struct {
	// CSIAddress is the driver's Unix socket; Timeout bounds every CSI call.
	CSIAddress string
	Timeout    time.Duration

	SnapshotNamePrefix          string
	SnapshotNameUUIDLength      int
	GroupSnapshotNamePrefix     string
	GroupSnapshotNameUUIDLength int
	// Groups handles VolumeGroupSnapshotContents (the CSIVolumeGroupSnapshot feature gate).
	Groups bool
	// ExtraCreateMetadata adds the snapshot and content names to CreateSnapshot parameters.
	ExtraCreateMetadata bool
	// NodeName, when set (--node-deployment), limits the sidecar to objects labelled
	// managed-by this node.
	NodeName string

	Workers                              int
	RetryIntervalStart, RetryIntervalMax time.Duration
	ResyncPeriod                         time.Duration
	// SyncTimeout is the deadline of each sync; 0 means none. Run raises one shorter than twice
	// Timeout to that, so that it never cuts a CSI call short.
	SyncTimeout time.Duration

	Client         app.ClientOptions
	LeaderElection app.LeaderElectionOptions
	// HTTP serves /metrics and /healthz/leader-election.
	HTTP app.HTTPOptions

	// Config, when set, is used instead of Client (tests wrap its transport).
	Config *rest.Config
}

// DefaultOptions are the defaults of the command line.
func DefaultOptions() Options {
	return Options{
		CSIAddress:                  "/run/csi/socket",
		Timeout:                     time.Minute,
		SnapshotNamePrefix:          protocol.DefaultSnapshotNamePrefix,
		SnapshotNameUUIDLength:      -1,
		GroupSnapshotNamePrefix:     protocol.DefaultGroupSnapshotNamePrefix,
		GroupSnapshotNameUUIDLength: -1,
		Groups:                      true,
		Workers:                     10,
		RetryIntervalStart:          time.Second,
		RetryIntervalMax:            5 * time.Minute,
		ResyncPeriod:                15 * time.Minute,
		SyncTimeout:                 controller.DefaultSyncTimeout,
		// About three writes per snapshot: 100/200 keeps a burst of hundreds of snapshots from
		// waiting on the client side, while API Priority and Fairness protects the server.
		Client: app.ClientOptions{QPS: 100, Burst: 200},
	}
}

// Run connects to the driver and reconciles its objects until ctx is done.
func Run(ctx context.Context, opts Options) error {
	logger := klog.FromContext(ctx)
	if d, raised := opts.syncTimeout(); raised {
		logger.Info("Raising --sync-timeout to twice --timeout, so that it never cuts a CSI call short", "syncTimeout", d, "timeout", opts.Timeout)
		opts.SyncTimeout = d
	}
	csiMetrics := csimetrics.NewCSIMetricsManagerForSidecar("")
	driver, err := csi.Connect(ctx, csi.ConnectOptions{Address: opts.CSIAddress, Timeout: opts.Timeout, Metrics: csiMetrics})
	if err != nil {
		return err
	}
	defer func() { _ = driver.Close() }()
	cfg := opts.Config
	if cfg == nil {
		if cfg, err = opts.Client.Config("csi-snapshotter/" + driver.DriverName()); err != nil {
			return err
		}
	}
	elector := app.NewElector(opts.LeaderElection, LeaseName(driver.DriverName())).
		After(protocol.LegacySidecarLeaseName(driver.DriverName()))
	c, err := newClients(cfg, elector)
	if err != nil {
		return err
	}
	reg := app.Registry()
	names.RegisterWorkqueue(reg) // before any queue exists, so every queue reports
	names.RegisterLeaderElection(reg)
	s := &sidecar{opts: opts, csi: driver, kube: c.kube, snapshots: c.snapshots, metrics: newMetrics(reg), cfg: cfg}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := app.ServeHTTP(ctx, opts.HTTP, gatherer(reg, csiMetrics.GetRegistry()), elector.Check()); err != nil {
			logger.Error(err, "HTTP endpoint failed")
		}
	})
	defer wg.Wait()
	return elector.Run(ctx, c.lease, s.run)
}

// syncTimeout is the deadline of each sync: SyncTimeout, raised to twice Timeout when shorter
// (raised reports that), so that a CSI call and the writes after it fit; 0 stays 0, no deadline.
func (o Options) syncTimeout() (d time.Duration, raised bool) {
	if o.SyncTimeout > 0 && o.SyncTimeout < 2*o.Timeout {
		return 2 * o.Timeout, true
	}
	return o.SyncTimeout, false
}

// clients are the sidecar's API clients.
type clients struct {
	// lease renews the leader election Lease; it is not fenced.
	lease kubernetes.Interface
	// kube (events, secret reads) and snapshots (content writes) go through the elector's
	// fence: a paused leader that resumes writes nothing once another replica may lead.
	kube      kubernetes.Interface
	snapshots clientset.Interface
}

func newClients(cfg *rest.Config, elector *app.Elector) (c clients, err error) {
	if c.lease, err = kubernetes.NewForConfig(app.Protobuf(cfg)); err != nil {
		return c, err
	}
	fenced := elector.Fenced(cfg)
	if c.kube, err = kubernetes.NewForConfig(app.Protobuf(fenced)); err != nil {
		return c, err
	}
	c.snapshots, err = clientset.NewForConfig(fenced)
	return c, err
}

// LeaseName is the leader election Lease of the sidecars of driver: the reference sidecar's name,
// so a Deployment that swaps one image for the other keeps one leader.
func LeaseName(driver string) string { return protocol.SidecarLeaseName(driver) }

// sidecar holds what the reconcilers share while running.
type sidecar struct {
	opts      Options
	cfg       *rest.Config
	csi       csi.Client
	kube      kubernetes.Interface
	snapshots clientset.Interface
	metrics   *metrics
}

// recorder starts an event broadcaster for the driver's events; stop ends it.
func (s *sidecar) recorder(ctx context.Context) (rec record.EventRecorder, stop func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.kube.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "csi-snapshotter " + s.csi.DriverName()}), b.Shutdown
}

// config is the reconciler configuration for single snapshots (group: true for groups).
func (s *sidecar) config(group bool) config {
	c := config{
		driver: s.csi.DriverName(), node: s.opts.NodeName, extraCreateMetadata: s.opts.ExtraCreateMetadata,
		namePrefix: s.opts.SnapshotNamePrefix, uuidLength: s.opts.SnapshotNameUUIDLength,
		retryStart: s.opts.RetryIntervalStart, retryMax: s.opts.RetryIntervalMax, workers: s.opts.Workers,
		syncTimeout: s.opts.SyncTimeout,
	}
	if group {
		c.namePrefix, c.uuidLength = s.opts.GroupSnapshotNamePrefix, s.opts.GroupSnapshotNameUUIDLength
	}
	if c.workers <= 0 {
		c.workers = 1
	}
	return c
}

// gatherer serves the component's registry and, of csi-lib-utils' registry, only the CSI call
// metrics: that registry also carries a process_start_time_seconds of its own whose help text
// differs from the Go client's, and a family gathered twice with two help texts makes the whole
// /metrics answer 500.
func gatherer(reg prometheus.Gatherer, csiRegistry prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.Gatherers{reg, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		families, err := csiRegistry.Gather()
		out := families[:0]
		for _, f := range families {
			if strings.HasPrefix(f.GetName(), names.CSIMetricPrefix) {
				out = append(out, f)
			}
		}
		return out, err
	})}
}
