package schedule

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
)

// status is the status a sync builds up; it is written once at the end, if it changed.
type status struct {
	schedulev1alpha1.SnapshotScheduleStatus
	now    metav1.Time
	pruned int64
}

// newStatus starts from the schedule's status, with the records of snapshots created by earlier
// syncs whose status write failed (pending).
func newStatus(s *schedulev1alpha1.SnapshotSchedule, now time.Time, pending []schedulev1alpha1.ScheduledSnapshot) *status {
	st := &status{now: metav1.NewTime(now)}
	if s.Status != nil {
		st.SnapshotScheduleStatus = *s.Status.DeepCopy()
	}
	st.ObservedGeneration = s.Generation
	st.record(pending...)
	return st
}

// watermark is the latest run dealt with (taken or missed), or the schedule's creation.
func (st *status) watermark(s *schedulev1alpha1.SnapshotSchedule) time.Time {
	w := s.CreationTimestamp.Time
	for _, t := range []*metav1.Time{st.LastScheduleTime, st.LastMissedTime} {
		if t != nil && t.After(w) {
			w = t.Time
		}
	}
	return w
}

func (st *status) condition(typ string, on bool, reason, msg string) {
	cond := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: msg,
		ObservedGeneration: st.ObservedGeneration, LastTransitionTime: st.now}
	if on {
		cond.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, cond)
}

func (st *status) suspend() {
	st.NextScheduleTime = nil
	st.condition(schedulev1alpha1.ConditionSuspended, true, ReasonSuspended, "spec.suspend is true: no snapshots are taken or pruned")
	st.condition(schedulev1alpha1.ConditionReady, false, ReasonSuspended, "the schedule is suspended")
}

func (st *status) resume() {
	st.condition(schedulev1alpha1.ConditionSuspended, false, ReasonScheduled, "")
}

// setInvalid reports a spec that cannot be followed; it tells whether that is news.
func (st *status) setInvalid(reason, msg string) bool {
	old := meta.FindStatusCondition(st.Conditions, schedulev1alpha1.ConditionReady)
	news := old == nil || old.Status != metav1.ConditionFalse || old.Reason != reason || old.Message != msg
	st.NextScheduleTime = nil
	st.condition(schedulev1alpha1.ConditionReady, false, reason, msg)
	return news
}

func (st *status) scheduleNext(next time.Time) {
	t := metav1.NewTime(next)
	st.NextScheduleTime = &t
	st.condition(schedulev1alpha1.ConditionReady, true, ReasonScheduled, "next run at "+next.UTC().Format(time.RFC3339))
}

// taken records the run at t; failReason is empty when its snapshots were created.
func (st *status) taken(t time.Time, failReason, msg string) {
	mt := metav1.NewTime(t)
	st.LastScheduleTime = &mt
	if failReason != "" {
		st.condition(schedulev1alpha1.ConditionFailing, true, failReason, msg)
		return
	}
	st.condition(schedulev1alpha1.ConditionFailing, false, ReasonRunning, "run "+t.UTC().Format(time.RFC3339)+" took its snapshots")
}

// missed counts n skipped runs; t, when set, is the latest of them.
func (st *status) missed(t time.Time, n int64) {
	st.MissedRuns += n
	if !t.IsZero() {
		mt := metav1.NewTime(t)
		st.LastMissedTime = &mt
	}
}

// previousPending tells whether a snapshot of the latest run taken is still being taken.
func (st *status) previousPending(items []Item) bool {
	if st.LastScheduleTime == nil {
		return false
	}
	for _, it := range items {
		if it.State == Pending && it.Time.Equal(st.LastScheduleTime.Time) {
			return true
		}
	}
	return false
}

// observe updates what follows from the snapshots left after pruning: their count, the latest
// run whose snapshots are all ready, and whether the latest run failed. It returns a message when
// a snapshot of the latest run newly failed.
func (st *status) observe(items []Item) string {
	st.KeptSnapshots = int32(len(items))
	st.PrunedSnapshots += st.pruned
	runs := map[time.Time]bool{} // run time -> all ready so far
	for _, it := range items {
		ready, seen := runs[it.Time]
		runs[it.Time] = (ready || !seen) && it.State == Ready
	}
	for t, ready := range runs {
		if ready && (st.LastSuccessfulTime == nil || t.After(st.LastSuccessfulTime.Time)) {
			mt := metav1.NewTime(t)
			st.LastSuccessfulTime = &mt
		}
	}
	if st.LastScheduleTime == nil {
		return ""
	}
	var failed []string
	for _, it := range items {
		if it.State == Failed && it.Time.Equal(st.LastScheduleTime.Time) {
			failed = append(failed, it.Name)
		}
	}
	old := meta.FindStatusCondition(st.Conditions, schedulev1alpha1.ConditionFailing)
	if len(failed) == 0 {
		if old != nil && old.Reason == ReasonSnapshotFailed {
			st.condition(schedulev1alpha1.ConditionFailing, false, ReasonRunning, "")
		}
		return ""
	}
	sort.Strings(failed)
	msg := fmt.Sprintf("snapshots of run %s failed: %s", st.LastScheduleTime.UTC().Format(time.RFC3339), strings.Join(failed, ", "))
	if old != nil && old.Reason == ReasonSnapshotFailed && old.Message == msg {
		return ""
	}
	st.condition(schedulev1alpha1.ConditionFailing, true, ReasonSnapshotFailed, msg)
	return msg
}

// writeStatus writes st if it differs from the schedule's status, with the schedule's
// resourceVersion as precondition; the write layer remembers the write. Once the status holds
// them, the pending records of the schedule are dropped.
func (r *Reconciler) writeStatus(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, st *status) error {
	if s.Status == nil || !apiequality.Semantic.DeepEqual(*s.Status, st.SnapshotScheduleStatus) {
		upd := s.DeepCopy()
		upd.Status = st.SnapshotScheduleStatus.DeepCopy()
		if _, err := r.writes.schedules.UpdateStatus(ctx, upd); err != nil {
			return err
		}
	}
	r.pending.forget(s.UID)
	return nil
}
