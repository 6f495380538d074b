package schedule

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
)

// A schedule's snapshots are those whose uids its status.snapshots records. The controller adds
// a record when it creates a snapshot and nobody else writes a schedule's status, so a snapshot
// that someone else created is never counted or pruned, whatever its name, labels, annotations
// or owner references say: the uid is the API server's, and cannot be chosen or reused.

// recordOf is the status record of an item.
func recordOf(it Item) schedulev1alpha1.ScheduledSnapshot {
	return schedulev1alpha1.ScheduledSnapshot{Name: it.Name, UID: it.UID, RunTime: metav1.NewTime(it.Time)}
}

// pendingRecords holds the records of the snapshots a sync created until a status write holds
// them: a sync whose status write failed leaves them here for the next sync of the schedule,
// which then finds its own snapshots instead of taking their names for someone else's. A
// controller that stops between a create and the status write forgets them: the snapshot is
// kept, labelled, but the schedule does not count or prune it.
type pendingRecords struct {
	mu         sync.Mutex
	bySchedule map[types.UID][]schedulev1alpha1.ScheduledSnapshot
}

func newPendingRecords() *pendingRecords {
	return &pendingRecords{bySchedule: map[types.UID][]schedulev1alpha1.ScheduledSnapshot{}}
}

func (p *pendingRecords) add(schedule types.UID, recs ...schedulev1alpha1.ScheduledSnapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bySchedule[schedule] = append(p.bySchedule[schedule], recs...)
}

func (p *pendingRecords) get(schedule types.UID) []schedulev1alpha1.ScheduledSnapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]schedulev1alpha1.ScheduledSnapshot(nil), p.bySchedule[schedule]...)
}

// forget drops the records of schedule: a status write holds them now, or the schedule is being
// deleted.
func (p *pendingRecords) forget(schedule types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.bySchedule, schedule)
}

// recorded tells whether uid is one of the schedule's snapshots.
func (st *status) recorded(uid types.UID) bool {
	for _, rec := range st.Snapshots {
		if rec.UID == uid {
			return true
		}
	}
	return false
}

// record adds the records of items not recorded yet. Beyond MaxScheduledSnapshots the oldest are
// let go; their names are returned.
func (st *status) record(recs ...schedulev1alpha1.ScheduledSnapshot) (released []string) {
	for _, rec := range recs {
		if !st.recorded(rec.UID) {
			st.Snapshots = append(st.Snapshots, rec)
		}
	}
	for len(st.Snapshots) > schedulev1alpha1.MaxScheduledSnapshots {
		released = append(released, st.Snapshots[0].Name)
		st.Snapshots = st.Snapshots[1:]
	}
	return released
}

// forget drops the records of names.
func (st *status) forget(names ...string) {
	if len(names) == 0 {
		return
	}
	drop := map[string]bool{}
	for _, n := range names {
		drop[n] = true
	}
	kept := st.Snapshots[:0:0]
	for _, rec := range st.Snapshots {
		if !drop[rec.Name] {
			kept = append(kept, rec)
		}
	}
	st.Snapshots = kept
}

// held returns the items still recorded.
func (st *status) held(items []Item) []Item {
	uids := map[types.UID]bool{}
	for _, rec := range st.Snapshots {
		uids[rec.UID] = true
	}
	var out []Item
	for _, it := range items {
		if uids[it.UID] {
			out = append(out, it)
		}
	}
	return out
}
