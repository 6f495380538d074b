package schedule

import (
	"context"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
)

// start is where the simulated schedules begin: Saturday 2030-03-30, 13:00 in Berlin, the day
// before Berlin springs forward (2030-03-31 02:00 CET -> 03:00 CEST).
var start = time.Date(2030, 3, 30, 12, 0, 0, 0, time.UTC)

// resume makes the schedule look as if its last run was at `at` and sets the clock there, so
// that the runs the test steps through have fixed times.
func (e *env) resume(t *testing.T, name string, at time.Time) {
	s, err := e.client.ScheduleV1alpha1().SnapshotSchedules(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mt := metav1.NewTime(at)
	s.Status = &schedulev1alpha1.SnapshotScheduleStatus{LastScheduleTime: &mt}
	if _, err := e.client.ScheduleV1alpha1().SnapshotSchedules(e.ns).UpdateStatus(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.clock.SetTime(at)
}

// run steps the clock to at, waits until the schedule has taken that run and returns the name
// of the snapshot of claim it expects (spelled out here, not computed by the code under test).
func (e *env) run(t *testing.T, schedule string, at time.Time) {
	t.Helper()
	e.clock.SetTime(at)
	e.waitSchedule(t, schedule, lastSchedule(at))
}

func stamp(at time.Time) string { return at.UTC().Format("20060102t1504z") }

// TestEveryMinute runs "every minute" in Europe/Berlin with maxCount 3, hourly 4, daily 2,
// weekly 2 for a simulated day (a week with SHUTTER_SCHEDULE_WEEK=1) while an actor marks every
// snapshot ready, and checks exactly which snapshots are left.
func TestEveryMinute(t *testing.T) {
	e := setup(t)
	e.claim(t, "data", map[string]string{"app": "db"})
	e.claim(t, "other", map[string]string{"app": "web"})
	e.schedule(t, "every", schedulev1alpha1.SnapshotScheduleSpec{
		Schedule: "* * * * *", TimeZone: ptr.To("Europe/Berlin"),
		ClaimSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		Retention:     &schedulev1alpha1.Retention{MaxCount: int32p(3), Hourly: int32p(4), Daily: int32p(2), Weekly: int32p(2)},
	})
	e.resume(t, "every", start)
	e.startController(t)
	e.readyActor(t)

	days := simulatedDays()
	began := time.Now()
	var seen []string
	last := start
	for at := start.Add(time.Minute); !at.After(start.Add(time.Duration(days) * 24 * time.Hour)); at = at.Add(time.Minute) {
		e.run(t, "every", at)
		seen = append(seen, "every-data-b104f442-"+stamp(at))
		last = at
	}
	want := map[int][]string{
		1: {"every-data-b104f442-20300330t1201z", "every-data-b104f442-20300330t2300z", "every-data-b104f442-20300331t0900z", "every-data-b104f442-20300331t1000z",
			"every-data-b104f442-20300331t1100z", "every-data-b104f442-20300331t1158z", "every-data-b104f442-20300331t1159z", "every-data-b104f442-20300331t1200z"},
		7: {"every-data-b104f442-20300330t1201z", "every-data-b104f442-20300331t2200z", "every-data-b104f442-20300404t2200z", "every-data-b104f442-20300405t2200z",
			"every-data-b104f442-20300406t0900z", "every-data-b104f442-20300406t1000z", "every-data-b104f442-20300406t1100z", "every-data-b104f442-20300406t1158z",
			"every-data-b104f442-20300406t1159z", "every-data-b104f442-20300406t1200z"},
	}[days]
	s := e.waitSchedule(t, "every", func(s *schedulev1alpha1.SnapshotSchedule) bool {
		return s.Status.KeptSnapshots == int32(len(want)) && s.Status.LastSuccessfulTime != nil && s.Status.LastSuccessfulTime.Equal(&metav1.Time{Time: last})
	})
	t.Logf("%d runs (%d simulated days) in %s", len(seen), days, time.Since(began).Round(time.Millisecond))
	kept := e.snapshots(t)
	logTable(t, seen, kept, mustZone(t, "Europe/Berlin"))
	if got := names(kept); !reflect.DeepEqual(got, want) {
		t.Errorf("kept:\n got %q\nwant %q", got, want)
	}
	if s.Status.MissedRuns != 0 || s.Status.PrunedSnapshots != int64(len(seen)-len(want)) {
		t.Errorf("missed %d, pruned %d; want 0, %d", s.Status.MissedRuns, s.Status.PrunedSnapshots, len(seen)-len(want))
	}
	for _, vs := range kept {
		if vs.Labels[schedulev1alpha1.LabelSchedule] != "every" || len(vs.OwnerReferences) != 0 {
			t.Errorf("%s: labels %v, owners %v (none by default)", vs.Name, vs.Labels, vs.OwnerReferences)
		}
	}
	if len(s.Status.Snapshots) != len(want) {
		t.Errorf("status.snapshots holds %d records, want %d", len(s.Status.Snapshots), len(want))
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
