package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
)

// Config is what the snapshot-controller hands the schedule reconciler: its clients, the
// informer factories it shares with the other reconcilers, and the event recorder.
type Config struct {
	// Kube is used for discovery (are the CRDs served?).
	Kube kubernetes.Interface
	// Client writes schedules' status and creates and deletes snapshots and group snapshots.
	Client        clientset.Interface
	KubeInformers informers.SharedInformerFactory
	SnapInformers snapinformers.SharedInformerFactory
	Recorder      record.EventRecorder
	// Registerer receives the schedule metrics once the reconciler starts; nil for none.
	Registerer prometheus.Registerer
	// Writes tunes the write layer: its Count is the snapshot-controller's count of API writes.
	Writes  kube.WriterOptions
	Options Options
}

// crdPoll is how often the controller checks whether the schedule and group CRDs are served.
const crdPoll = 30 * time.Second

// New builds the reconciler on informers of the shared factories; start the factories (again),
// then Run.
func New(cfg Config) (*Reconciler, error) {
	opts := cfg.Options
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	r := &Reconciler{opts: opts, client: cfg.Client, recorder: cfg.Recorder, clock: opts.Clock,
		timers: map[controller.Key]clock.Timer{}, writes: newWriteLayer(cfg.Client, cfg.Writes), pending: newPendingRecords()}
	r.queue = controller.NewQueue("snapshotschedule", opts.Retry, r.syncKey)
	schedules := cfg.SnapInformers.Schedule().V1alpha1().SnapshotSchedules()
	vs := cfg.SnapInformers.Snapshot().V1().VolumeSnapshots()
	pvc := cfg.KubeInformers.Core().V1().PersistentVolumeClaims()
	r.schedules, r.claims = schedules.Lister(), pvc.Lister()
	r.snapshots = newVolumeSnapshots(cfg.Client, vs.Lister(), r.writes.snapshots)
	for _, h := range []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{schedules.Informer(), controller.Handler(r.writes.schedules.Cache(), func(s *schedulev1alpha1.SnapshotSchedule) {
			r.queue.Add(controller.KeyOf(s))
		})},
		{vs.Informer(), controller.Handler(r.writes.snapshots.Cache(), func(vs *snapshotv1.VolumeSnapshot) { r.onSnapshot(vs.Namespace, vs.Labels) })},
	} {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return nil, fmt.Errorf("add event handler: %w", err)
		}
		r.synced = append(r.synced, h.informer.HasSynced)
	}
	r.synced = append(r.synced, pvc.Informer().HasSynced)
	return r, nil
}

// EnableGroups lets group schedules take VolumeGroupSnapshots, on an informer of factory (which
// the caller starts again), and looks at every group schedule again.
func (r *Reconciler) EnableGroups(ctx context.Context, factory snapinformers.SharedInformerFactory) error {
	vgs := factory.Groupsnapshot().V1().VolumeGroupSnapshots()
	if _, err := vgs.Informer().AddEventHandler(controller.Handler(r.writes.groups.Cache(), func(g *groupv1.VolumeGroupSnapshot) {
		r.onSnapshot(g.Namespace, g.Labels)
	})); err != nil {
		return fmt.Errorf("add event handler: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), vgs.Informer().HasSynced) {
		return ctx.Err()
	}
	groups := newVolumeGroupSnapshots(r.client, vgs.Lister(), r.writes.groups)
	r.groups.Store(&groups)
	list, err := r.schedules.List(everything())
	if err != nil {
		return err
	}
	for _, s := range list {
		if s.Spec.Group {
			r.queue.Add(controller.KeyOf(s))
		}
	}
	return nil
}

// RunWhenServed runs the schedule reconciler, and lets it take group snapshots, as soon as the
// API server serves the SnapshotSchedule kind (and the group kinds, if groups is true): at once
// when the CRDs are installed, or whenever they are installed later. It returns when ctx is done.
func RunWhenServed(ctx context.Context, cfg Config, groups bool) {
	logger := klog.FromContext(ctx).WithName("schedule")
	ctx = klog.NewContext(ctx, logger)
	if !waitServed(ctx, cfg.Kube, schedulev1alpha1.SchemeGroupVersion.String(), "snapshotschedules") {
		return
	}
	r, err := New(cfg)
	if err != nil {
		logger.Error(err, "Cannot start the SnapshotSchedule reconciler")
		return
	}
	if cfg.Registerer != nil {
		if err := registerOnce(cfg.Registerer); err != nil {
			logger.Error(err, "Cannot register schedule metrics")
		}
	}
	cfg.KubeInformers.Start(ctx.Done())
	cfg.SnapInformers.Start(ctx.Done())
	if groups {
		go func() {
			if waitServed(ctx, cfg.Kube, groupv1.SchemeGroupVersion.String(), "volumegroupsnapshots") {
				if err := r.EnableGroups(ctx, cfg.SnapInformers); err != nil {
					logger.Error(err, "Cannot enable group schedules")
				}
			}
		}()
	}
	if err := r.Run(ctx); err != nil {
		logger.Error(err, "SnapshotSchedule reconciler stopped")
	}
}

// waitServed checks every crdPoll until the API server serves resource in groupVersion; false
// when ctx ends first.
func waitServed(ctx context.Context, kube kubernetes.Interface, groupVersion, resource string) bool {
	for {
		list, err := kube.Discovery().ServerResourcesForGroupVersion(groupVersion)
		if err == nil {
			for _, res := range list.APIResources {
				if res.Name == resource {
					return true
				}
			}
		}
		klog.FromContext(ctx).V(2).Info("CRD not served yet; checking again later", "groupVersion", groupVersion,
			"resource", resource, "retryIn", crdPoll)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(crdPoll):
		}
	}
}
