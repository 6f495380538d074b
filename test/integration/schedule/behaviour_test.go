package schedule

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
)

func hourly(retention *schedulev1alpha1.Retention) schedulev1alpha1.SnapshotScheduleSpec {
	return schedulev1alpha1.SnapshotScheduleSpec{Schedule: "0 * * * *",
		ClaimSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Retention: retention}
}

func (e *env) update(t *testing.T, name string, change func(*schedulev1alpha1.SnapshotSchedule)) {
	t.Helper()
	s, err := e.client.ScheduleV1alpha1().SnapshotSchedules(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(s)
	if _, err := e.client.ScheduleV1alpha1().SnapshotSchedules(e.ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func condition(typ string, status metav1.ConditionStatus, reason string) func(*schedulev1alpha1.SnapshotSchedule) bool {
	return func(s *schedulev1alpha1.SnapshotSchedule) bool {
		c := s.Status != nil && meta.FindStatusCondition(s.Status.Conditions, typ) != nil
		if !c {
			return false
		}
		got := meta.FindStatusCondition(s.Status.Conditions, typ)
		return got.Status == status && got.Reason == reason
	}
}

// TestSuspend: a suspended schedule takes nothing, even when its runs come due; resumed, it
// takes the latest run once and counts the ones it skipped.
func TestSuspend(t *testing.T) {
	e := setup(t)
	e.claim(t, "data", map[string]string{"app": "db"})
	e.schedule(t, "hourly", hourly(nil))
	e.resume(t, "hourly", start)
	e.startController(t)
	e.run(t, "hourly", start.Add(time.Hour))

	e.update(t, "hourly", func(s *schedulev1alpha1.SnapshotSchedule) { s.Spec.Suspend = true })
	s := e.waitSchedule(t, "hourly", condition(schedulev1alpha1.ConditionSuspended, metav1.ConditionTrue, "Suspended"))
	if s.Status.NextScheduleTime != nil {
		t.Errorf("suspended, next run %v", s.Status.NextScheduleTime)
	}
	e.clock.SetTime(start.Add(3*time.Hour + 30*time.Minute))
	// Make the reconciler look (a label change), then check it took nothing.
	e.waitSynced(t, func() {
		e.update(t, "hourly", func(s *schedulev1alpha1.SnapshotSchedule) { s.Labels = map[string]string{"poke": "1"} })
	})
	if got := names(e.snapshots(t)); !reflect.DeepEqual(got, []string{"hourly-data-421878c7-20300330t1300z"}) {
		t.Fatalf("while suspended: %q", got)
	}

	e.update(t, "hourly", func(s *schedulev1alpha1.SnapshotSchedule) { s.Spec.Suspend = false })
	s = e.waitSchedule(t, "hourly", lastSchedule(start.Add(3*time.Hour)))
	if s.Status.MissedRuns != 1 {
		t.Errorf("missed %d runs, want 1 (14:00Z; 15:00Z was taken late)", s.Status.MissedRuns)
	}
	want := []string{"hourly-data-421878c7-20300330t1300z", "hourly-data-421878c7-20300330t1500z"}
	if got := names(e.snapshots(t)); !reflect.DeepEqual(got, want) {
		t.Errorf("after resume: %q, want %q", got, want)
	}
}

// TestOutage: the controller is down for three hours. With a starting deadline the run due when
// it comes back is late and skipped too; nothing is taken until the next run, and never a burst.
// A restarted controller never takes a run twice.
func TestOutage(t *testing.T) {
	e := setup(t)
	e.claim(t, "data", map[string]string{"app": "db"})
	spec := hourly(nil)
	spec.StartingDeadlineSeconds = ptr.To(int64(60))
	e.schedule(t, "hourly", spec)
	e.resume(t, "hourly", start)
	stop := e.startController(t)
	e.run(t, "hourly", start.Add(time.Hour))
	stop()

	e.clock.SetTime(start.Add(4*time.Hour + 2*time.Minute)) // 16:00Z is two minutes late
	stop = e.startController(t)
	s := e.waitSchedule(t, "hourly", func(s *schedulev1alpha1.SnapshotSchedule) bool { return s.Status.MissedRuns == 3 })
	if s.Status.LastMissedTime == nil || !s.Status.LastMissedTime.Equal(&metav1.Time{Time: start.Add(4 * time.Hour)}) {
		t.Errorf("last missed %v, want 16:00Z", s.Status.LastMissedTime)
	}
	if got := names(e.snapshots(t)); !reflect.DeepEqual(got, []string{"hourly-data-421878c7-20300330t1300z"}) {
		t.Fatalf("after the outage: %q", got)
	}
	e.run(t, "hourly", start.Add(5*time.Hour))

	// Restarted after a status write that recorded the 17:00Z snapshot but not the run (as if
	// lastScheduleTime were lost): the run is due again and finds its snapshot recorded.
	stop()
	e.rewind(t, "hourly", start.Add(4*time.Hour))
	e.startController(t)
	e.run(t, "hourly", start.Add(5*time.Hour))
	e.run(t, "hourly", start.Add(6*time.Hour))
	want := []string{"hourly-data-421878c7-20300330t1300z", "hourly-data-421878c7-20300330t1700z", "hourly-data-421878c7-20300330t1800z"}
	if got := names(e.snapshots(t)); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// rewind sets the schedule's lastScheduleTime back to at, keeping the rest of its status.
func (e *env) rewind(t *testing.T, name string, at time.Time) {
	t.Helper()
	s, err := e.client.ScheduleV1alpha1().SnapshotSchedules(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Status.LastScheduleTime = &metav1.Time{Time: at}
	if _, err := e.client.ScheduleV1alpha1().SnapshotSchedules(e.ns).UpdateStatus(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestKeepAndFailed: a snapshot labelled keep=true outlives maxCount; a failed snapshot marks
// the schedule Failing, pushes no ready snapshot out, and goes once a later one is ready.
func TestKeepAndFailed(t *testing.T) {
	e := setup(t)
	e.claim(t, "data", map[string]string{"app": "db"})
	e.schedule(t, "hourly", hourly(&schedulev1alpha1.Retention{MaxCount: int32p(2)}))
	e.resume(t, "hourly", start)
	e.startController(t)
	at := func(h int) time.Time { return start.Add(time.Duration(h) * time.Hour) }
	name := func(h int) string { return "hourly-data-421878c7-" + stamp(at(h)) }

	e.run(t, "hourly", at(1))
	e.setStatus(t, name(1), true, "")
	vs := e.snapshots(t)[name(1)]
	vs.Labels[schedulev1alpha1.LabelKeep] = "true"
	if _, err := e.client.SnapshotV1().VolumeSnapshots(e.ns).Update(context.Background(), vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for h := 2; h <= 4; h++ {
		e.run(t, "hourly", at(h))
		e.setStatus(t, name(h), true, "")
	}
	e.run(t, "hourly", at(5))
	e.setStatus(t, name(5), false, "backend out of space")
	s := e.waitSchedule(t, "hourly", condition(schedulev1alpha1.ConditionFailing, metav1.ConditionTrue, "SnapshotFailed"))
	if msg := meta.FindStatusCondition(s.Status.Conditions, schedulev1alpha1.ConditionFailing).Message; !strings.Contains(msg, name(5)) {
		t.Errorf("Failing message %q does not name %s", msg, name(5))
	}
	want := []string{name(1), name(3), name(4), name(5)}
	if got := names(e.snapshots(t)); !reflect.DeepEqual(got, want) {
		t.Errorf("after a failure: %q, want %q (keep, the two newest ready, the failed one)", got, want)
	}

	e.run(t, "hourly", at(6))
	e.setStatus(t, name(6), true, "")
	e.waitSchedule(t, "hourly", func(s *schedulev1alpha1.SnapshotSchedule) bool {
		return s.Status.KeptSnapshots == 3 && condition(schedulev1alpha1.ConditionFailing, metav1.ConditionFalse, "Running")(s)
	})
	want = []string{name(1), name(4), name(6)}
	if got := names(e.snapshots(t)); !reflect.DeepEqual(got, want) {
		t.Errorf("after the next ready run: %q, want %q", got, want)
	}
}

// TestGroup: group: true takes one VolumeGroupSnapshot of the selected claims per run and
// prunes group snapshots as one series.
func TestGroup(t *testing.T) {
	e := setup(t)
	e.claim(t, "data", map[string]string{"app": "db"})
	e.claim(t, "logs", map[string]string{"app": "db"})
	spec := hourly(&schedulev1alpha1.Retention{MaxCount: int32p(1)})
	spec.Group = true
	spec.SnapshotTemplate = &schedulev1alpha1.SnapshotTemplate{Labels: map[string]string{"team": "a"}, VolumeGroupSnapshotClassName: ptr.To("gclass")}
	e.schedule(t, "db", spec)
	e.resume(t, "db", start)
	e.startController(t)
	groups := e.client.GroupsnapshotV1().VolumeGroupSnapshots(e.ns)
	for h := 1; h <= 2; h++ {
		at := start.Add(time.Duration(h) * time.Hour)
		e.run(t, "db", at)
		g, err := groups.Get(context.Background(), "db-"+stamp(at), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if g.Spec.Source.Selector == nil || g.Spec.Source.Selector.MatchLabels["app"] != "db" || *g.Spec.VolumeGroupSnapshotClassName != "gclass" || g.Labels["team"] != "a" {
			t.Errorf("group snapshot %s: %+v %v", g.Name, g.Spec, g.Labels)
		}
		g.Status = &groupv1.VolumeGroupSnapshotStatus{ReadyToUse: ptr.To(true)}
		if _, err := groups.UpdateStatus(context.Background(), g, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitSchedule(t, "db", func(s *schedulev1alpha1.SnapshotSchedule) bool { return s.Status.PrunedSnapshots == 1 })
	list, err := groups.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range list.Items {
		if g.DeletionTimestamp == nil {
			got = append(got, g.Name)
		}
	}
	if want := []string{"db-20300330t1400z"}; !reflect.DeepEqual(got, want) {
		t.Errorf("group snapshots %q, want %q", got, want)
	}
	if n := len(e.snapshots(t)); n != 0 {
		t.Errorf("%d VolumeSnapshots in group mode", n)
	}
}

// TestInvalid: what CEL cannot check (the time zone database, a date that never comes) is
// reported in Ready and not retried until the schedule changes.
func TestInvalid(t *testing.T) {
	e := setup(t)
	spec := hourly(nil)
	spec.TimeZone = ptr.To("Mars/Olympus_Mons")
	e.schedule(t, "tz", spec)
	never := hourly(nil)
	never.Schedule = "0 0 30 2 *"
	e.schedule(t, "never", never)
	e.startController(t)
	e.waitSchedule(t, "tz", condition(schedulev1alpha1.ConditionReady, metav1.ConditionFalse, "UnknownTimeZone"))
	e.waitSchedule(t, "never", condition(schedulev1alpha1.ConditionReady, metav1.ConditionFalse, "InvalidSchedule"))
	e.update(t, "tz", func(s *schedulev1alpha1.SnapshotSchedule) { s.Spec.TimeZone = ptr.To("Europe/Berlin") })
	e.waitSchedule(t, "tz", condition(schedulev1alpha1.ConditionReady, metav1.ConditionTrue, "Scheduled"))
}
