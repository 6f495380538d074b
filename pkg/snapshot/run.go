package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/prometheus/client_golang/prometheus"
	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	snapscheme "github.com/shutter-csi/shutter/client/clientset/versioned/scheme"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
	"github.com/shutter-csi/shutter/pkg/app"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/schedule"
)

// RunOptions are everything cmd/snapshot-controller takes from its flags.
type RunOptions struct {
	Client         app.ClientOptions
	LeaderElection app.LeaderElectionOptions
	// HTTP serves /metrics and /healthz.
	HTTP app.HTTPOptions
	// RetryCRDIntervalMax caps the backoff while waiting for the snapshot CRDs at start.
	RetryCRDIntervalMax time.Duration
	Controller          Options
}

// Name is the component's name in events, the user agent and the Lease.
const Name = "snapshot-controller"

// Run runs the snapshot-controller until ctx is done.
func Run(ctx context.Context, opts RunOptions) error {
	logger := klog.FromContext(ctx)
	cfg, err := opts.Client.Config(Name)
	if err != nil {
		return err
	}
	elector := app.NewElector(opts.LeaderElection, Name+"-leader")
	// Every write but the Lease's goes through the fence: a paused leader that resumes writes
	// nothing once another replica may lead.
	clients, err := newClients(elector.Fenced(cfg))
	if err != nil {
		return err
	}
	// Lease renewals get a client of their own, so that no burst of writes can delay them.
	election, err := kubernetes.NewForConfig(app.Protobuf(cfg))
	if err != nil {
		return err
	}
	if err := waitForCRDs(ctx, clients.Kube, opts.RetryCRDIntervalMax); err != nil {
		return err
	}
	opts.Controller = fitToRole(ctx, election, opts.Controller)
	reg := app.Registry()
	metrics.RegisterWorkqueue(reg)
	metrics.RegisterLeaderElection(reg)
	httpErr := make(chan error, 1)
	go func() { httpErr <- app.ServeHTTP(ctx, opts.HTTP, reg, elector.Check()) }()

	err = elector.Run(ctx, election, func(ctx context.Context) {
		if err := runController(ctx, clients, reg, opts.Controller); err != nil {
			logger.Error(err, "Controller stopped")
		}
	})
	if err != nil {
		return err
	}
	return <-httpErr
}

// Rules beyond the upstream snapshot-controller's RBAC (deploy/kubernetes/snapshot-controller in
// kubernetes-csi/external-snapshotter), which Shutter's chart grants and a swapped-in image may
// not have.
var (
	// patchClaims: upstream's role grants update, not patch, on claims.
	patchClaims  = app.Rule{Verb: "patch", Resource: "persistentvolumeclaims"}
	updateClaims = app.Rule{Verb: "update", Resource: "persistentvolumeclaims"}
	// livenessRules: the sidecar liveness check watches the Leases of every namespace.
	livenessRules = []app.Rule{{Verb: "list", Group: "coordination.k8s.io", Resource: "leases"},
		{Verb: "watch", Group: "coordination.k8s.io", Resource: "leases"}}
	// scheduleRules: SnapshotSchedules are Shutter's own kind.
	scheduleRules = []app.Rule{{Verb: "list", Group: schedulev1alpha1.GroupName, Resource: "snapshotschedules"},
		{Verb: "watch", Group: schedulev1alpha1.GroupName, Resource: "snapshotschedules"},
		{Verb: "update", Group: schedulev1alpha1.GroupName, Resource: "snapshotschedules", Subresource: "status"}}
)

// fitToRole adapts opts to what the controller's RBAC role grants: claims are written with an
// update when patching them is not allowed, and the features that need rules the role lacks
// turn themselves off, each with one warning naming the missing rules.
func fitToRole(ctx context.Context, kube kubernetes.Interface, opts Options) Options {
	logger := klog.FromContext(ctx)
	if missing, err := app.Missing(ctx, kube, patchClaims); err == nil && len(missing) > 0 {
		if m, err := app.Missing(ctx, kube, updateClaims); err == nil && len(m) == 0 {
			logger.Info("Writing claim finalizers with get and update: the role grants update but not patch on persistentvolumeclaims")
			opts.UpdateClaims = true
		}
	}
	if opts.SidecarLivenessThreshold > 0 && !app.Permitted(ctx, kube, "The sidecar liveness check (--sidecar-liveness-threshold)", livenessRules...) {
		opts.SidecarLivenessThreshold = 0
	}
	if opts.Schedules && !app.Permitted(ctx, kube, "SnapshotSchedules (--snapshot-schedules)", scheduleRules...) {
		opts.Schedules = false
	}
	return opts
}

// newClients builds the controller's clients from cfg, each with a rate limiter of its own (see
// Clients). Built-in kinds are read and written in protobuf.
func newClients(cfg *rest.Config) (Clients, error) {
	var c Clients
	var err error
	if c.Kube, err = kubernetes.NewForConfig(app.Protobuf(cfg)); err != nil {
		return c, err
	}
	if c.Events, err = kubernetes.NewForConfig(app.Protobuf(cfg)); err != nil {
		return c, err
	}
	if c.Snapshots, err = clientset.NewForConfig(cfg); err != nil {
		return c, err
	}
	c.Contents, err = clientset.NewForConfig(cfg)
	return c, err
}

func runController(ctx context.Context, clients Clients, reg prometheus.Registerer, opts Options) error {
	kube := clients.Kube
	kubeInformers, snapInformers := InformerFactories(clients)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	events := clients.Events
	if events == nil {
		events = kube
	}
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(EventScheme(), corev1.EventSource{Component: Name})

	c, err := New(clients, kubeInformers, snapInformers, recorder, opts)
	if err != nil {
		return err
	}
	reg.MustRegister(c.Collectors()...)
	restoreGC := app.LowerGCWhileSyncing()
	defer restoreGC()
	kubeInformers.Start(ctx.Done())
	snapInformers.Start(ctx.Done())
	go func() {
		cache.WaitForCacheSync(ctx.Done(), c.synced...)
		restoreGC()
	}()
	if opts.Groups {
		go enableGroupsWhenServed(ctx, kube, c, snapInformers)
	}
	if opts.Schedules {
		go schedule.RunWhenServed(ctx, schedule.Config{Kube: kube, Client: clients.Snapshots, KubeInformers: kubeInformers,
			SnapInformers: snapInformers, Recorder: recorder, Registerer: reg, Writes: c.writes.opts,
			Options: schedule.Options{Retry: opts.Retry}}, opts.Groups)
	}
	defer kubeInformers.Shutdown()
	defer snapInformers.Shutdown()
	return c.Run(ctx)
}

// EventScheme knows the core kinds and the snapshot kinds, for event object references.
func EventScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(snapscheme.AddToScheme(s))
	return s
}

// waitForCRDs waits, with a doubling backoff capped at maxInterval, until the API server serves
// the snapshot kinds, and fails with a clear message once a wait would exceed the cap.
func waitForCRDs(ctx context.Context, kubeClient kubernetes.Interface, maxInterval time.Duration) error {
	logger := klog.FromContext(ctx)
	want := []string{"volumesnapshots", "volumesnapshotcontents", "volumesnapshotclasses"}
	err := kube.WaitServed(ctx, kubeClient.Discovery(), snapshotv1.SchemeGroupVersion.String(), want, kube.Poll{
		Interval: time.Second, Factor: 2, Max: maxInterval,
		OnMissing: func(missing []string, err error, retryIn time.Duration) {
			logger.Info("Waiting for the snapshot CRDs", "missing", missing, "retryIn", retryIn, "err", err)
		},
	})
	var notServed *kube.NotServedError
	if errors.As(err, &notServed) {
		return fmt.Errorf("%w; install Shutter's CRDs (client/config/crd) and start again", err)
	}
	return err
}

// enableGroupsWhenServed starts the group reconcilers as soon as the API server serves the group
// kinds: at once when their CRDs are installed, or whenever they are installed later, without a
// restart. Single snapshots are served meanwhile.
func enableGroupsWhenServed(ctx context.Context, kubeClient kubernetes.Interface, c *Controller, factory snapinformers.SharedInformerFactory) {
	logger := klog.FromContext(ctx)
	want := []string{"volumegroupsnapshots", "volumegroupsnapshotcontents", "volumegroupsnapshotclasses"}
	err := kube.WaitServed(ctx, kubeClient.Discovery(), groupv1.SchemeGroupVersion.String(), want, kube.Poll{
		Interval: kube.GroupCRDPoll,
		OnMissing: func(missing []string, _ error, retryIn time.Duration) {
			logger.Info("Group snapshot CRDs are not installed; serving single snapshots only and checking again later",
				"missing", missing, "retryIn", retryIn)
		},
	})
	if err != nil {
		return
	}
	if err := c.EnableGroups(ctx, factory); err != nil {
		logger.Error(err, "Cannot start group snapshot reconcilers")
	}
}
