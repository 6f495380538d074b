package schedule

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/client/clientset/versioned/fake"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
	"github.com/shutter-csi/shutter/pkg/kube"
)

// fixture is a reconciler on fake clients, synced by hand.
type fixture struct {
	r      *Reconciler
	client *fake.Clientset
	clock  *testingclock.FakeClock
	events *record.FakeRecorder
	// writes counts the write layer's requests as "kind write result".
	writes map[string]int
}

func newFixture(t *testing.T, now time.Time, objs ...runtime.Object) *fixture {
	var kubeObjs, snapObjs []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*corev1.PersistentVolumeClaim); ok {
			kubeObjs = append(kubeObjs, o)
		} else {
			snapObjs = append(snapObjs, o)
		}
	}
	kubeClient := kubefake.NewClientset(kubeObjs...)
	client := fake.NewClientset(snapObjs...)
	client.PrependReactor("create", "*", apiServerMeta())
	kubeInf := informers.NewSharedInformerFactory(kubeClient, 0)
	snapInf := snapinformers.NewSharedInformerFactory(client, 0)
	f := &fixture{client: client, clock: testingclock.NewFakeClock(now), events: record.NewFakeRecorder(100), writes: map[string]int{}}
	count := func(kind, write string, err error) {
		result := "ok"
		if err != nil {
			result = "error"
		}
		f.writes[kind+" "+write+" "+result]++
	}
	r, err := New(Config{Client: client, KubeInformers: kubeInf, SnapInformers: snapInf, Recorder: f.events,
		Writes: kube.WriterOptions{Count: count}, Options: Options{Clock: f.clock}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kubeInf.Start(ctx.Done())
	snapInf.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), r.synced...)
	f.r = r
	return f
}

// apiServerMeta is a reactor that does what the API server does and the fake does not: it
// generates the name from generateName and gives every created object a uid.
func apiServerMeta() k8stesting.ReactionFunc {
	n := 0
	return func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj := action.(k8stesting.CreateAction).GetObject().(metav1.Object)
		n++
		if obj.GetName() == "" && obj.GetGenerateName() != "" {
			obj.SetName(fmt.Sprintf("%sgen%d", obj.GetGenerateName(), n))
		}
		if obj.GetUID() == "" {
			obj.SetUID(types.UID("uid-" + obj.GetName()))
		}
		return false, nil, nil
	}
}

// taken returns a snapshot of claim the schedule took for the run at, and records it in the
// schedule's status. Its uid is "uid-<name>".
func taken(s *schedulev1alpha1.SnapshotSchedule, claim string, at time.Time, st *snapshotv1.VolumeSnapshotStatus) *snapshotv1.VolumeSnapshot {
	vs := &snapshotv1.VolumeSnapshot{
		Spec:   snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &claim}},
		Status: st}
	setMeta(vs, s, SnapshotName(s.Name, claim, at), at)
	vs.UID = types.UID("uid-" + vs.Name)
	s.Status.Snapshots = append(s.Status.Snapshots, schedulev1alpha1.ScheduledSnapshot{Name: vs.Name, UID: vs.UID, RunTime: metav1.NewTime(at)})
	return vs
}

// creates returns the names of the objects created, generateName followed by "*" for a name the
// API server generates.
func (f *fixture) creates() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "create" {
			obj := a.(k8stesting.CreateAction).GetObject().(metav1.Object)
			name := obj.GetName()
			if name == "" {
				name = obj.GetGenerateName() + "*"
			}
			out = append(out, name)
		}
	}
	return out
}

func testSchedule(last time.Time, mutate func(*schedulev1alpha1.SnapshotSchedule)) *schedulev1alpha1.SnapshotSchedule {
	lt := metav1.NewTime(last)
	s := &schedulev1alpha1.SnapshotSchedule{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", UID: "uid-s", CreationTimestamp: metav1.NewTime(last.Add(-time.Hour))},
		Spec: schedulev1alpha1.SnapshotScheduleSpec{Schedule: "0 * * * *",
			ClaimSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
		Status: &schedulev1alpha1.SnapshotScheduleStatus{LastScheduleTime: &lt},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func testClaim(name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "db"}}}
}

func TestSyncTakesOnlyTheLatestRun(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		now         time.Time
		deadline    *int64
		wantCreates []string
		wantMissed  int64
		wantLast    time.Time
	}{
		{name: "nothing due", now: t0.Add(59 * time.Minute), wantLast: t0},
		{name: "on time", now: t0.Add(time.Hour), wantCreates: []string{"s-a-51b369cc-20300101t1100z", "s-b-c823d9cd-20300101t1100z"}, wantLast: t0.Add(time.Hour)},
		{name: "after three hours down: the latest only", now: t0.Add(3*time.Hour + 20*time.Minute),
			wantCreates: []string{"s-a-51b369cc-20300101t1300z", "s-b-c823d9cd-20300101t1300z"}, wantMissed: 2, wantLast: t0.Add(3 * time.Hour)},
		{name: "later than the deadline", now: t0.Add(3*time.Hour + 20*time.Minute), deadline: ptr.To(int64(600)),
			wantMissed: 3, wantLast: t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSchedule(t0, func(s *schedulev1alpha1.SnapshotSchedule) { s.Spec.StartingDeadlineSeconds = tc.deadline })
			f := newFixture(t, tc.now, s, testClaim("a"), testClaim("b"))
			if err := f.r.sync(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			if got := f.creates(); len(got) != len(tc.wantCreates) || (len(got) > 0 && (got[0] != tc.wantCreates[0] || got[1] != tc.wantCreates[1])) {
				t.Errorf("created %q, want %q", got, tc.wantCreates)
			}
			got, err := f.client.ScheduleV1alpha1().SnapshotSchedules("ns").Get(context.Background(), "s", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.MissedRuns != tc.wantMissed || !got.Status.LastScheduleTime.Time.Equal(tc.wantLast) {
				t.Errorf("missed %d, last %v; want %d, %v", got.Status.MissedRuns, got.Status.LastScheduleTime, tc.wantMissed, tc.wantLast)
			}
			if got.Status.NextScheduleTime == nil || got.Status.NextScheduleTime.Time.Sub(tc.now) > time.Hour {
				t.Errorf("next run %v", got.Status.NextScheduleTime)
			}
		})
	}
}

// TestWritesAreCounted: the reconciler's creates, status writes and deletes go through the write
// layer, which counts each (in the snapshot-controller, shutter_controller_api_writes_total).
func TestWritesAreCounted(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	s := testSchedule(t0, func(s *schedulev1alpha1.SnapshotSchedule) {
		s.Spec.Retention = &schedulev1alpha1.Retention{MaxCount: ptr.To(int32(1))}
	})
	ready := &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
	older := taken(s, "a", t0.Add(-time.Hour), ready)
	newer := taken(s, "a", t0, ready)
	f := newFixture(t, t0.Add(time.Hour), s, testClaim("a"), testClaim("b"), older, newer)
	if err := f.r.sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"volumesnapshot create ok": 2, "volumesnapshot delete ok": 1, "snapshotschedule status ok": 1}
	if !reflect.DeepEqual(f.writes, want) {
		t.Errorf("writes %v, want %v", f.writes, want)
	}
}

// TestSyncRunTakenBefore: a run whose status write failed is taken again by the next sync, which
// finds the snapshot it made (recorded in memory until a status write holds it) instead of
// taking it twice or taking its name for someone else's.
func TestSyncRunTakenBefore(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	s := testSchedule(t0, nil)
	f := newFixture(t, t0.Add(time.Hour), s, testClaim("a"))
	ctx := context.Background()
	conflict := apierrors.NewConflict(schedulev1alpha1.Resource("snapshotschedules"), "s", errors.New("changed"))
	f.client.PrependReactor("update", "snapshotschedules", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, conflict
	})
	if err := f.r.sync(ctx, s); !apierrors.IsConflict(err) {
		t.Fatalf("first sync: %v, want the conflict", err)
	}
	f.client.ReactionChain = f.client.ReactionChain[1:]
	if err := f.r.sync(ctx, s); err != nil {
		t.Fatalf("second sync: %v", err)
	}
	if got, want := f.creates(), []string{"s-a-51b369cc-20300101t1100z"}; !reflect.DeepEqual(got, want) {
		t.Errorf("creates %q, want %q", got, want)
	}
	vss, err := f.client.SnapshotV1().VolumeSnapshots("ns").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(vss.Items) != 1 || vss.Items[0].Name != "s-a-51b369cc-20300101t1100z" {
		t.Fatalf("snapshots %v", vss.Items)
	}
	got, err := f.client.ScheduleV1alpha1().SnapshotSchedules("ns").Get(ctx, "s", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []schedulev1alpha1.ScheduledSnapshot{{Name: "s-a-51b369cc-20300101t1100z", UID: "uid-s-a-51b369cc-20300101t1100z",
		RunTime: metav1.NewTime(t0.Add(time.Hour))}}
	if !reflect.DeepEqual(got.Status.Snapshots, want) {
		t.Errorf("status.snapshots %+v, want %+v", got.Status.Snapshots, want)
	}
	if len(f.events.Events) != 0 {
		t.Errorf("events %v", <-f.events.Events)
	}
}

// TestSyncForbid: with concurrencyPolicy Forbid a run waits while the previous run's snapshot is
// neither ready nor failed, and starts once it is.
func TestSyncForbid(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	s := testSchedule(t0, func(s *schedulev1alpha1.SnapshotSchedule) {
		s.Spec.ConcurrencyPolicy = schedulev1alpha1.ConcurrencyForbid
	})
	prev := taken(s, "a", t0, nil)
	for _, tc := range []struct {
		name        string
		status      *snapshotv1.VolumeSnapshotStatus
		wantCreates int
	}{
		{name: "previous pending", status: nil, wantCreates: 0},
		{name: "previous ready", status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}, wantCreates: 1},
		{name: "previous failed", status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(false),
			Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("no space")}}, wantCreates: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := prev.DeepCopy()
			vs.Status = tc.status
			f := newFixture(t, t0.Add(time.Hour), s, testClaim("a"), vs)
			if err := f.r.sync(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			if got := f.creates(); len(got) != tc.wantCreates {
				t.Errorf("created %q, want %d", got, tc.wantCreates)
			}
		})
	}
}
