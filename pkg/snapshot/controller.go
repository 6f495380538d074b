// Package snapshot is the snapshot-controller: it binds VolumeSnapshots to
// VolumeSnapshotContents, creates contents for dynamic snapshots, and runs deletion and every
// finalizer of the public snapshot protocol. It never talks to a CSI driver; the sidecar in the
// driver's pod does that, and the two meet only through the content objects.
//
// Invariants, kept by every transition:
//   - A write is made only when the object differs from what the protocol wants; one write per
//     transition, with a resourceVersion precondition, recorded in the own-write cache.
//   - A dynamic snapshot's content is named snapcontent-<snapshot uid>, so a retry after a crash
//     finds what the first try made; it carries its finalizer from creation.
//   - A content is never deleted while the sidecar's being-created annotation is on it.
//   - Bad user input ends in a Warning event and status.error, and is not retried until an
//     object it depends on changes.
package snapshot

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
	"github.com/shutter-csi/shutter/pkg/controller"
)

// Options configure the reconcilers.
type Options struct {
	// Workers is the number of workers per queue.
	Workers int
	// Retry bounds the per-key backoff of every queue.
	Retry controller.Options
	// ResyncPeriod re-queues every object this often as a safety net; 0 disables it.
	ResyncPeriod time.Duration
	// DistributedSnapshotting labels contents with the node of their volume.
	DistributedSnapshotting bool
	// PreventVolumeModeConversion records each content's source volume mode.
	PreventVolumeModeConversion bool
	// Groups turns on VolumeGroupSnapshots (the CSIVolumeGroupSnapshot feature gate).
	Groups bool
	// Schedules runs the SnapshotSchedule reconciler (pkg/schedule) once its CRD is served.
	Schedules bool
	// StatusGrace is how long a new snapshot's status waits for the sidecar's first report, so
	// that binding and readiness usually land in one write.
	StatusGrace time.Duration
	// ReadyEvents records a Normal event when a snapshot or group snapshot becomes ready. Off by
	// default: readyToUse in the status says the same, and the event is a write per snapshot.
	// Warning events for failures are always recorded.
	ReadyEvents bool
	// SidecarLivenessThreshold is how long a content may wait for its driver's csi-snapshotter
	// before, if no sidecar of the driver holds a live Lease, its snapshot gets a Warning event;
	// 0 turns the check (and the Lease watch) off.
	SidecarLivenessThreshold time.Duration
	// SidecarLeaseNamespaces are namespaces whose Leases count for that check besides
	// kube-system and those of the ServiceAccounts allowed to write contents (liveness.go).
	SidecarLeaseNamespaces []string
	// UpdateClaims writes claims' finalizers with a read and an update instead of a patch, for
	// roles that grant update but not patch on claims (the upstream snapshot-controller's).
	UpdateClaims bool
}

// Clients are the controller's API clients. Each has a client-side rate limiter of its own, so
// that writes to one kind never wait behind a burst of writes to another: a snapshot costs about
// as many writes to its content as to itself.
type Clients struct {
	// Kube reads and patches claims.
	Kube kubernetes.Interface
	// Events records events; nil means Kube.
	Events kubernetes.Interface
	// Snapshots writes VolumeSnapshots and VolumeGroupSnapshots.
	Snapshots clientset.Interface
	// Contents writes VolumeSnapshotContents and VolumeGroupSnapshotContents; nil means Snapshots.
	Contents clientset.Interface
}

// Controller runs the reconcilers: one generic reconciler (reconciler.go) for single snapshots
// and their contents, and, once enabled, another for group snapshots and theirs, all writing
// through one write layer (writes.go).
type Controller struct {
	opts     Options
	clients  Clients
	recorder record.EventRecorder
	clock    clock.PassiveClock
	writes   *writeLayer

	// single adapts the single kinds; singles reconciles them.
	single  *snapshotKind
	singles *singleReconciler
	synced  []cache.InformerSynced

	// groups reconciles the group kinds once they are enabled and served; nil until then.
	groups atomic.Pointer[groups]
	// liveness watches the sidecars' Leases; nil when SidecarLivenessThreshold is 0.
	liveness *liveness
}

// New wires the reconcilers to informers from the two factories; start the factories, then Run.
func New(clients Clients, kubeInformers informers.SharedInformerFactory,
	snapInformers snapinformers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.Workers <= 0 {
		opts.Workers = 10
	}
	if opts.StatusGrace == 0 {
		opts.StatusGrace = 10 * time.Second
	}
	c := &Controller{opts: opts, clients: clients, recorder: recorder, clock: clock.RealClock{}, writes: newWriteLayer(clients, opts.UpdateClaims)}
	if opts.SidecarLivenessThreshold > 0 {
		c.liveness = newLiveness(clients.Kube, opts.SidecarLivenessThreshold, opts.SidecarLeaseNamespaces)
	}
	vs := snapInformers.Snapshot().V1().VolumeSnapshots()
	vsc := snapInformers.Snapshot().V1().VolumeSnapshotContents()
	class := snapInformers.Snapshot().V1().VolumeSnapshotClasses()
	pvc := kubeInformers.Core().V1().PersistentVolumeClaims()
	pv := kubeInformers.Core().V1().PersistentVolumes()
	for _, idx := range []struct {
		informer cache.SharedIndexInformer
		indexers cache.Indexers
	}{
		{vs.Informer(), cache.Indexers{bySourcePVC: snapshotsBySourcePVC, byGroup: snapshotsByGroup}},
		{class.Informer(), cache.Indexers{byDriver: classesByDriver}},
		{pvc.Informer(), cache.Indexers{byRestoreSource: claimsByRestoreSource}},
		{pv.Informer(), cache.Indexers{byVolumeHandle: volumesByHandle}},
	} {
		if err := idx.informer.AddIndexers(idx.indexers); err != nil {
			return nil, fmt.Errorf("add indexers: %w", err)
		}
	}
	c.single = &snapshotKind{client: clients.Snapshots,
		snapshots: vs.Lister(), snapshotIndexer: vs.Informer().GetIndexer(), snapshotWrites: c.writes.snapshots.Cache(),
		contents: vsc.Lister(), classes: class.Lister(), classIndexer: class.Informer().GetIndexer(),
		claims: pvc.Lister(), claimIndexer: pvc.Informer().GetIndexer(), claimWriter: c.writes.claims, volumes: pv.Lister(), volumeIndexer: pv.Informer().GetIndexer(),
		preventVolumeModeConversion: opts.PreventVolumeModeConversion, distributedSnapshotting: opts.DistributedSnapshotting,
		groups: &c.groups}
	r, synced, err := newReconciler(c, pair[*snapshotv1.VolumeSnapshot, *snapshotv1.VolumeSnapshotContent]{
		kind: c.single, snapshots: c.writes.snapshots, contents: c.writes.contents,
		snapshotInformer: vs.Informer(), contentInformer: vsc.Informer(), classInformer: class.Informer(),
		// Single snapshots come by the thousand, in bursts and after restarts: the nearly done go
		// first, the first list is paced, and a new snapshot's status waits for the sidecar's
		// first report so that binding and readiness usually land in one write.
		tuning: tuning{urgentFirst: true, pacedStart: true, statusGrace: opts.StatusGrace},
	})
	if err != nil {
		return nil, err
	}
	c.singles = r
	// Claims only wake snapshots, which their own first list queues.
	if _, err := pvc.Informer().AddEventHandler(controller.HandlerWithInitialList(c.writes.claims.Cache(), c.onClaim,
		func(*corev1.PersistentVolumeClaim) {})); err != nil {
		return nil, fmt.Errorf("add event handler: %w", err)
	}
	c.synced = append(append(c.synced, synced...), pvc.Informer().HasSynced, pv.Informer().HasSynced)
	return c, nil
}

// EnableGroups starts the group reconcilers on informers from factory (which the caller starts
// again afterwards so the new informers run). It is safe to call while Run runs.
func (c *Controller) EnableGroups(ctx context.Context, factory snapinformers.SharedInformerFactory) error {
	if c.groups.Load() != nil {
		return nil
	}
	g, err := c.newGroups(factory)
	if err != nil {
		return err
	}
	if !c.groups.CompareAndSwap(nil, g) {
		return nil
	}
	factory.Start(ctx.Done())
	go g.run(ctx, c.opts.Workers, c.opts.ResyncPeriod)
	return nil
}

// Run waits for the caches, then runs the workers until ctx is done and in-flight syncs finish,
// the group reconcilers' too.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("caches did not sync")
	}
	logger.Info("Caches synced; starting workers", "workers", c.opts.Workers)
	if c.liveness != nil {
		go c.runLiveness(ctx)
	}
	c.singles.run(ctx, c.opts.Workers, c.opts.ResyncPeriod)
	if g := c.groups.Load(); g != nil {
		<-g.stopped
	}
	return nil
}

// onClaim queues the snapshots of a claim that still depend on it (bySourcePVC) and the one it
// is restored from.
func (c *Controller) onClaim(pvc *corev1.PersistentVolumeClaim) {
	for _, vs := range indexed[*snapshotv1.VolumeSnapshot](c.single.snapshotIndexer, bySourcePVC, nsName(pvc.Namespace, pvc.Name)) {
		c.singles.snapshotQueue.Add(controller.KeyOf(vs))
	}
	if name := restoreSource(pvc); name != "" {
		c.singles.snapshotQueue.Add(controller.Key{Namespace: pvc.Namespace, Name: name})
	}
}
