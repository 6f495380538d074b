// Package schedule is the SnapshotSchedule reconciler of the snapshot-controller: it takes
// VolumeSnapshots (or VolumeGroupSnapshots) on a cron schedule and prunes them by the
// schedule's retention policy.
//
// Invariants, kept by every transition:
//   - The schedule's snapshots are those recorded, by uid, in its status.snapshots (records.go);
//     a record is added only by the create that made the snapshot. Nothing a snapshot carries
//     (name, label, annotation, owner reference) makes it the schedule's.
//   - A run's snapshots are named from the schedule, the claim and the run's UTC time only
//     (names.go), so a retry finds what it took (recorded, or pending in memory while its status
//     write failed) instead of taking it twice. A name that holds an object not recorded is not
//     adopted: the run takes a generated name.
//   - At most one run is taken per sync: the latest one due. Runs before it, and a run later than
//     startingDeadlineSeconds, are counted as missed, never taken as a burst.
//   - Only recorded snapshots are ever pruned, by a delete with their uid as precondition;
//     never one labelled snapshot.shutter.dev/keep=true, never one still being taken, and a
//     failed one never makes a ready one go (see Policy).
//   - The schedule's owner reference is on its snapshots exactly while
//     spec.deleteSnapshotsWithSchedule is true: by default deleting a schedule leaves its backups.
//   - Each schedule has one timer, on the reconciler's clock, that adds its key to the queue at
//     its next run; nothing polls. (The queue's own delays, its retries, stay on real time.)
//   - Every write goes through the write layer (writes.go): counted, remembered in the
//     own-write cache. Status is written through the status subresource, only when it changed,
//     with the resourceVersion as precondition.
package schedule

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	schedulelisters "github.com/shutter-csi/shutter/client/listers/snapshotschedule/v1alpha1"
	"github.com/shutter-csi/shutter/pkg/controller"
)

// Options configure the reconciler.
type Options struct {
	// Workers is the number of workers of the schedule queue.
	Workers int
	// Retry bounds the per-key backoff.
	Retry controller.Options
	// Clock is the time schedules are read against and their timers run on; nil means the
	// real clock. Tests pass a fake clock and step it.
	Clock clock.WithDelayedExecution
	// Synced, when set, is called after each sync of a schedule (tests wait on it).
	Synced func(key controller.Key)
}

// Reconciler reconciles SnapshotSchedules.
type Reconciler struct {
	opts     Options
	client   clientset.Interface
	recorder record.EventRecorder
	clock    clock.WithDelayedExecution

	schedules schedulelisters.SnapshotScheduleLister
	claims    corelisters.PersistentVolumeClaimLister
	snapshots kind
	// groups is the kind of group schedules once the group snapshot kinds are served.
	groups atomic.Pointer[kind]

	writes *writeLayer
	// pending are the records of snapshots created but not yet in a status write.
	pending *pendingRecords
	queue   *controller.Queue[controller.Key]
	synced  []cache.InformerSynced

	// timersMu guards timers, each schedule's wake-up at its next run.
	timersMu sync.Mutex
	timers   map[controller.Key]clock.Timer
}

// Run waits for the caches, then runs the workers until ctx is done.
func (r *Reconciler) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return fmt.Errorf("schedule caches did not sync")
	}
	klog.FromContext(ctx).Info("Schedule caches synced; starting workers", "workers", r.opts.Workers)
	r.queue.Run(ctx, r.opts.Workers)
	return nil
}

func (r *Reconciler) syncKey(ctx context.Context, key controller.Key) error {
	if r.opts.Synced != nil {
		defer r.opts.Synced(key)
	}
	s, err := r.schedules.SnapshotSchedules(key.Namespace).Get(key.Name)
	if err != nil {
		r.wakeAt(key, time.Time{})
		return ignoreNotFound(err)
	}
	s = r.writes.schedules.Cache().Latest(s)
	logger := klog.FromContext(ctx).WithValues("snapshotschedule", klog.KObj(s))
	return r.sync(klog.NewContext(ctx, logger), s)
}

// onSnapshot queues the schedule that took a snapshot or group snapshot.
func (r *Reconciler) onSnapshot(namespace string, labels map[string]string) {
	if name := labels[schedulev1alpha1.LabelSchedule]; name != "" {
		r.queue.Add(controller.Key{Namespace: namespace, Name: name})
	}
}

// kindOf is the kind a schedule takes; nil for a group schedule while the group kinds are not
// served.
func (r *Reconciler) kindOf(s *schedulev1alpha1.SnapshotSchedule) kind {
	if !s.Spec.Group {
		return r.snapshots
	}
	if g := r.groups.Load(); g != nil {
		return *g
	}
	return nil
}

func (r *Reconciler) now() time.Time { return r.clock.Now() }

// wakeAt replaces the schedule's timer with one that queues key at next; a zero next only stops
// the timer.
func (r *Reconciler) wakeAt(key controller.Key, next time.Time) {
	r.timersMu.Lock()
	defer r.timersMu.Unlock()
	if t, ok := r.timers[key]; ok {
		t.Stop()
		delete(r.timers, key)
	}
	if next.IsZero() {
		return
	}
	d := next.Sub(r.clock.Now())
	if d <= 0 { // the run came due while the sync ran
		r.queue.Add(key)
		return
	}
	timer := r.clock.AfterFunc(d, func() { r.queue.Add(key) })
	// The clock may have passed next between reading it and starting the timer, which then
	// counts d from a later time: the run is due now.
	if !r.clock.Now().Before(next) {
		timer.Stop()
		r.queue.Add(key)
		return
	}
	r.timers[key] = timer
}
