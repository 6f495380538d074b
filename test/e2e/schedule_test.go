package e2e

import (
	"context"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

// TestSchedule runs a SnapshotSchedule "every minute, keep 1" on the real stack: its snapshots
// become ready through controller, sidecar and driver, and the older one is pruned, down to the
// backend snapshot. It takes two to three minutes of real time.
func TestSchedule(t *testing.T) {
	s := start(t)
	ns := testenv.Namespace(t, s.Kube)
	newVolume(t, s, ns, "data")
	_, err := s.Snapshots.ScheduleV1alpha1().SnapshotSchedules(ns).Create(context.Background(), &schedulev1alpha1.SnapshotSchedule{
		ObjectMeta: metav1.ObjectMeta{Name: "minutely"},
		Spec: schedulev1alpha1.SnapshotScheduleSpec{Schedule: "* * * * *", ClaimSelector: metav1.LabelSelector{},
			Retention: &schedulev1alpha1.Retention{MaxCount: ptr.To[int32](1)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := waitScheduled(t, s, ns, func(ready []string, _ int) bool { return len(ready) == 1 })[0]
	vs := waitReady(t, s, ns, first)
	handle := ptr.Deref(contentOf(t, s, vs).Status.SnapshotHandle, "")
	if !backendHas(t, s, handle) {
		t.Fatalf("the driver does not list %s's snapshot %s", first, handle)
	}
	// The next run's snapshot becomes ready and the first one is pruned.
	kept := waitScheduled(t, s, ns, func(ready []string, all int) bool {
		return all == 1 && len(ready) == 1 && ready[0] != first
	})
	testenv.WaitUntil(t, "backend snapshot "+handle+" of the pruned "+first+" gone", readyTimeout, func(context.Context) bool {
		return !backendHas(t, s, handle)
	})
	sched, err := s.Snapshots.ScheduleV1alpha1().SnapshotSchedules(ns).Get(context.Background(), "minutely", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := sched.Status
	if st == nil || st.PrunedSnapshots < 1 || st.LastSuccessfulTime == nil || st.NextScheduleTime == nil {
		t.Errorf("status %+v", st)
	}
	t.Logf("took %s, pruned %s (backend snapshot %s gone), kept %s; status: pruned %d, missed %d", first, first, handle, kept[0],
		st.PrunedSnapshots, st.MissedRuns)
}

// waitScheduled polls the schedule's snapshots until ok holds for the names of the ready ones
// and the count of all, and returns the ready ones.
func waitScheduled(t *testing.T, s *stack.Stack, ns string, ok func(ready []string, all int) bool) []string {
	t.Helper()
	type scheduled struct {
		ready []string
		all   int
	}
	got := testenv.WaitFor(t, "scheduled snapshots", 3*time.Minute, func(ctx context.Context) (scheduled, error) {
		var sc scheduled
		list, err := s.Snapshots.SnapshotV1().VolumeSnapshots(ns).List(ctx, metav1.ListOptions{LabelSelector: schedulev1alpha1.LabelSchedule + "=minutely"})
		if err != nil {
			return sc, err
		}
		for _, vs := range list.Items {
			if vs.DeletionTimestamp != nil {
				continue
			}
			sc.all++
			if stack.Ready(&vs) {
				sc.ready = append(sc.ready, vs.Name)
			}
		}
		sort.Strings(sc.ready)
		return sc, nil
	}, func(sc scheduled) bool { return ok(sc.ready, sc.all) })
	return got.ready
}
