package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/metrics"
)

// Event reasons.
const (
	ReasonInvalidSchedule  = "InvalidSchedule"
	ReasonUnknownTimeZone  = "UnknownTimeZone"
	ReasonInvalidRetention = "InvalidRetention"
	ReasonGroupsNotServed  = "GroupSnapshotsNotServed"
	ReasonCreateFailed     = "CreateFailed"
	ReasonNoClaims         = "NoClaimsSelected"
	ReasonSnapshotFailed   = "SnapshotFailed"
	ReasonMissedRun        = "MissedRun"
	ReasonPruneFailed      = "PruneFailed"
	ReasonNameTaken        = "NameTaken"
	ReasonReleased         = "SnapshotsReleased"
	ReasonScheduled        = "Scheduled"
	ReasonSuspended        = "Suspended"
	ReasonRunning          = "Running"
)

// sync is the schedule's state diagram: an invalid spec stops it; a suspended schedule only
// reports; otherwise the run due (if any) is taken or counted as missed, the schedule's
// recorded snapshots are pruned and given or relieved of its owner reference, the status is
// written, and the key waits for the next run.
func (r *Reconciler) sync(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule) error {
	key := controller.KeyOf(s)
	if s.DeletionTimestamp != nil {
		r.wakeAt(key, time.Time{})
		r.pending.forget(s.UID) // no status will hold them
		return nil
	}
	st := newStatus(s, r.now(), r.pending.get(s.UID))
	r.wakeAt(key, time.Time{})
	c, policy, err := parseSpec(s)
	if err != nil {
		return r.invalid(ctx, s, st, err)
	}
	k := r.kindOf(s)
	if k == nil {
		return r.invalid(ctx, s, st, fmt.Errorf("%w: group: true needs the groupsnapshot.storage.k8s.io CRDs", errGroupsNotServed))
	}
	if s.Spec.Suspend {
		st.suspend()
		return r.writeStatus(ctx, s, st)
	}
	st.resume()
	now := r.now()
	items, gone := k.resolve(ctx, s, st.Snapshots)
	st.forget(gone...)
	made, err := r.runDue(ctx, s, st, c, k, items, now)
	if err != nil {
		return err
	}
	items = st.held(append(items, made...))
	items = r.prune(ctx, s, st, k, policy, c.Location(), items, now)
	ownErr := r.own(ctx, s, k, items)
	if msg := st.observe(items); msg != "" {
		r.recorder.Event(s, corev1.EventTypeWarning, ReasonSnapshotFailed, msg)
		scheduleFailures.WithLabelValues(ReasonSnapshotFailed).Inc()
	}
	next := c.Next(now)
	st.scheduleNext(next)
	// The timer is set before the status says when the next run is: whoever reads that status
	// and lets the time pass finds the timer running.
	r.wakeAt(key, next)
	scheduleNextRun.Observe(next.Sub(now).Seconds())
	if err := r.writeStatus(ctx, s, st); err != nil {
		return err
	}
	return ownErr
}

// runDue takes the latest run due since the last one dealt with, or counts it missed. It
// returns the snapshots it made.
func (r *Reconciler) runDue(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, st *status, c *Cron,
	k kind, items []Item, now time.Time) ([]Item, error) {
	logger := klog.FromContext(ctx)
	due, earlier, ok := c.Due(st.watermark(s), now)
	if !ok {
		return nil, nil
	}
	late := now.Sub(due)
	if d := s.Spec.StartingDeadlineSeconds; d != nil && late > time.Duration(*d)*time.Second {
		r.missed(s, st, due, earlier+1, "the run is later than startingDeadlineSeconds")
		return nil, nil
	}
	if s.Spec.ConcurrencyPolicy == schedulev1alpha1.ConcurrencyForbid && st.previousPending(items) {
		logger.V(4).Info("Previous run not ready; holding the run", "run", due)
		return nil, nil
	}
	if earlier > 0 {
		r.missed(s, st, time.Time{}, earlier, "their time passed while the controller was down, the schedule was suspended or a run was held back")
	}
	return r.take(ctx, s, st, k, items, due, late)
}

// take creates the run's snapshots and records the run in st.
func (r *Reconciler) take(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, st *status, k kind, items []Item,
	due time.Time, late time.Duration) ([]Item, error) {
	claims, err := r.selectClaims(s)
	if err != nil {
		return nil, r.invalid(ctx, s, st, err)
	}
	if len(claims) == 0 {
		msg := fmt.Sprintf("no claim in namespace %s matches claimSelector; run %s took nothing", s.Namespace, due.Format(time.RFC3339))
		r.recorder.Event(s, corev1.EventTypeWarning, ReasonNoClaims, msg)
		st.taken(due, ReasonNoClaims, msg)
		scheduleRuns.WithLabelValues(metrics.RunFailed).Inc()
		return nil, nil
	}
	series := []string{""} // one group snapshot of them all
	if !s.Spec.Group {
		series = claims
	}
	made, err := r.create(ctx, s, st, k, series, items, due)
	switch {
	case err == nil:
		st.taken(due, "", "")
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err):
		// Not going to change by retrying; the next run may fare better.
		r.recorder.Event(s, corev1.EventTypeWarning, ReasonCreateFailed, err.Error())
		st.taken(due, ReasonCreateFailed, err.Error())
		scheduleRuns.WithLabelValues(metrics.RunFailed).Inc()
		return made, nil
	default:
		// The run is not recorded, so the retry takes it again: what this try made is recorded
		// (pending), and the retry makes only the rest.
		return made, err
	}
	scheduleRuns.WithLabelValues(metrics.RunTaken).Inc()
	scheduleRunLag.Observe(late.Seconds())
	klog.FromContext(ctx).V(2).Info("Took scheduled snapshots", "run", due, "claims", len(claims), "late", late)
	return made, nil
}

// create takes the run at due of each series (a claim, or "" for the group snapshot) that items
// do not hold already, and records what it made in st and in the pending records.
func (r *Reconciler) create(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, st *status, k kind,
	series []string, items []Item, due time.Time) ([]Item, error) {
	var made []Item
	for _, sr := range series {
		if slices.ContainsFunc(items, func(it Item) bool { return it.Series == sr && it.Time.Equal(due) }) {
			continue
		}
		it, squatted, err := k.create(ctx, s, sr, due, st.recorded)
		if err != nil {
			return made, err
		}
		if squatted != "" {
			r.recorder.Eventf(s, corev1.EventTypeWarning, ReasonNameTaken,
				"%s %s exists but this schedule did not create it; the run of %s took %s instead",
				k.name(), squatted, due.UTC().Format(time.RFC3339), it.Name)
		}
		rec := recordOf(it)
		r.pending.add(s.UID, rec)
		if released := st.record(rec); len(released) > 0 {
			r.recorder.Eventf(s, corev1.EventTypeWarning, ReasonReleased,
				"status.snapshots holds at most %d snapshots: %s kept but no longer counted or pruned",
				schedulev1alpha1.MaxScheduledSnapshots, strings.Join(released, ", "))
		}
		made = append(made, it)
	}
	return made, nil
}

// missed counts n runs as skipped, the latest of them at t (zero: not the one due).
func (r *Reconciler) missed(s *schedulev1alpha1.SnapshotSchedule, st *status, t time.Time, n int64, why string) {
	st.missed(t, n)
	scheduleMissedRuns.Add(float64(n))
	r.recorder.Eventf(s, corev1.EventTypeWarning, ReasonMissedRun, "skipped %d run(s): %s", n, why)
}

// prune deletes the snapshots the policy does not keep and returns those left.
func (r *Reconciler) prune(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, st *status, k kind,
	p Policy, loc *time.Location, items []Item, now time.Time) []Item {
	names := p.Prune(items, loc, now)
	if len(names) == 0 {
		return items
	}
	gone := map[string]bool{}
	for _, name := range names {
		gone[name] = true
	}
	var left []Item
	for _, it := range items {
		if !gone[it.Name] {
			left = append(left, it)
			continue
		}
		done, err := k.delete(ctx, s.Namespace, it)
		if err != nil {
			r.recorder.Eventf(s, corev1.EventTypeWarning, ReasonPruneFailed, "cannot prune %s: %v", it.Name, err)
			left = append(left, it)
			continue
		}
		st.forget(it.Name)
		if !done { // pruned before, by a sync whose deletion the lister had not seen yet
			continue
		}
		st.pruned++
		schedulePruned.Inc()
		klog.FromContext(ctx).V(2).Info("Pruned scheduled snapshot", "snapshot", it.Name, "run", it.Time)
	}
	return left
}

// own keeps the schedule's owner reference on its snapshots as spec.deleteSnapshotsWithSchedule
// says: added when it is true, removed when it is false. It returns the first error, after
// trying every snapshot.
func (r *Reconciler) own(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, k kind, items []Item) error {
	want := s.Spec.DeleteSnapshotsWithSchedule
	var first error
	for _, it := range items {
		if it.Owned == want {
			continue
		}
		if err := k.own(ctx, s, it, want); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// selectClaims returns the names of the claims the selector picks, sorted, leaving out those
// being deleted.
func (r *Reconciler) selectClaims(s *schedulev1alpha1.SnapshotSchedule) ([]string, error) {
	sel, err := metav1.LabelSelectorAsSelector(&s.Spec.ClaimSelector)
	if err != nil {
		return nil, fmt.Errorf("%w: claimSelector: %v", errInvalidSchedule, err)
	}
	all, err := r.claims.PersistentVolumeClaims(s.Namespace).List(sel)
	if err != nil {
		return nil, err
	}
	var claims []string
	for _, pvc := range all {
		if pvc.DeletionTimestamp == nil {
			claims = append(claims, pvc.Name)
		}
	}
	sort.Strings(claims)
	return claims, nil
}

// invalid reports a spec the controller cannot follow (once per change: the event and the
// condition), and stops retrying until the schedule changes.
func (r *Reconciler) invalid(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, st *status, err error) error {
	reason := ReasonInvalidSchedule
	switch {
	case errors.Is(err, errUnknownTimeZone):
		reason = ReasonUnknownTimeZone
	case errors.Is(err, errInvalidRetention):
		reason = ReasonInvalidRetention
	case errors.Is(err, errGroupsNotServed):
		reason = ReasonGroupsNotServed
	}
	if st.setInvalid(reason, err.Error()) {
		r.recorder.Event(s, corev1.EventTypeWarning, reason, err.Error())
		scheduleFailures.WithLabelValues(reason).Inc()
	}
	if werr := r.writeStatus(ctx, s, st); werr != nil {
		return werr
	}
	return controller.Final(err)
}

// parseSpec reads the schedule's cron expression, zone and retention.
func parseSpec(s *schedulev1alpha1.SnapshotSchedule) (*Cron, Policy, error) {
	tz := ""
	if s.Spec.TimeZone != nil {
		tz = *s.Spec.TimeZone
	}
	c, err := ParseCron(s.Spec.Schedule, tz)
	if err != nil {
		return nil, Policy{}, err
	}
	p, err := ParsePolicy(s.Spec.Retention)
	if err != nil {
		return nil, Policy{}, fmt.Errorf("%w: %v", errInvalidRetention, err)
	}
	return c, p, nil
}

var (
	errInvalidRetention = errors.New("invalid retention")
	errGroupsNotServed  = errors.New("group snapshots not served")
)

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
