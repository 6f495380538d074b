package schedule

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/test/testenv"
)

// forged is a ready snapshot of claim a that someone else created to look like the schedule's:
// its label, an owner reference to it, a run in 2099.
func forged(s *schedulev1alpha1.SnapshotSchedule, name string) *snapshotv1.VolumeSnapshot {
	vs := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, UID: types.UID("uid-" + name),
			Labels:          map[string]string{schedulev1alpha1.LabelSchedule: s.Name},
			Annotations:     map[string]string{schedulev1alpha1.AnnotationScheduledTime: "2099-01-01T00:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{ownerReference(s)}},
		Spec:   snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("a")}},
		Status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)},
	}
	return vs
}

// verbs returns the API calls of verb on resource, as "name" (deletes) or the patch body.
func (f *fixture) calls(verb, resource string) []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetVerb() != verb || a.GetResource().Resource != resource {
			continue
		}
		switch a := a.(type) {
		case k8stesting.DeleteAction:
			out = append(out, a.GetName())
		case k8stesting.PatchAction:
			out = append(out, a.GetName()+" "+string(a.GetPatch()))
		}
	}
	return out
}

func (f *fixture) status(t *testing.T) *schedulev1alpha1.SnapshotScheduleStatus {
	t.Helper()
	got, err := f.client.ScheduleV1alpha1().SnapshotSchedules("ns").Get(context.Background(), "s", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status
}

func recordedNames(st *schedulev1alpha1.SnapshotScheduleStatus) []string {
	var out []string
	for _, r := range st.Snapshots {
		out = append(out, r.Name)
	}
	return out
}

// TestForgedSnapshotsAreNeitherCountedNorPruned: retention counts and prunes only the recorded
// snapshots; ready snapshots that carry the schedule's label, owner reference and a run in
// 2099 are left alone, and the genuine ones go only as the policy says.
func TestForgedSnapshotsAreNeitherCountedNorPruned(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	s := testSchedule(t0, func(s *schedulev1alpha1.SnapshotSchedule) {
		s.Spec.Retention = &schedulev1alpha1.Retention{MaxCount: ptr.To(int32(2))}
	})
	ready := &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
	g1, g2 := taken(s, "a", t0.Add(-time.Hour), ready), taken(s, "a", t0, ready)
	f := newFixture(t, t0.Add(time.Hour), s, testClaim("a"), g1, g2, forged(s, "fake-1"), forged(s, "fake-2"))
	if err := f.r.sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	// The run at 11:00 is still being taken: maxCount 2 keeps g1 and g2.
	if got := f.calls("delete", "volumesnapshots"); len(got) != 0 {
		t.Errorf("deleted %q", got)
	}
	// Once it is ready, the oldest genuine one goes; the forged ones never do.
	s = f.syncAgain(t, "s-a-51b369cc-20300101t1100z")
	if got, want := f.calls("delete", "volumesnapshots"), []string{g1.Name}; !reflect.DeepEqual(got, want) {
		t.Errorf("deleted %q, want %q", got, want)
	}
	if got, want := recordedNames(s.Status), []string{g2.Name, "s-a-51b369cc-20300101t1100z"}; !reflect.DeepEqual(got, want) {
		t.Errorf("status.snapshots %q, want %q", got, want)
	}
	if s.Status.KeptSnapshots != 2 {
		t.Errorf("keptSnapshots %d, want 2", s.Status.KeptSnapshots)
	}
}

// syncAgain marks name ready, as the snapshot controller would, and syncs the schedule as
// stored; it returns the schedule after the sync.
func (f *fixture) syncAgain(t *testing.T, name string) *schedulev1alpha1.SnapshotSchedule {
	t.Helper()
	ctx := context.Background()
	vs, err := f.client.SnapshotV1().VolumeSnapshots("ns").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vs.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
	if _, err := f.client.SnapshotV1().VolumeSnapshots("ns").UpdateStatus(ctx, vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitListed(t, name, func(vs *snapshotv1.VolumeSnapshot) bool { return vs.Status != nil })
	s, err := f.client.ScheduleV1alpha1().SnapshotSchedules("ns").Get(ctx, "s", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.r.sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	if s, err = f.client.ScheduleV1alpha1().SnapshotSchedules("ns").Get(ctx, "s", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitListed waits until the informer's copy of the snapshot name satisfies ok.
func (f *fixture) waitListed(t *testing.T, name string, ok func(*snapshotv1.VolumeSnapshot) bool) {
	t.Helper()
	lister := f.r.snapshots.(*runKind[*snapshotv1.VolumeSnapshot]).get
	testenv.WaitFor(t, "the informer's copy of "+name, 10*time.Second, func(context.Context) (*snapshotv1.VolumeSnapshot, error) {
		return lister("ns", name)
	}, func(vs *snapshotv1.VolumeSnapshot) bool { return vs != nil && ok(vs) })
}

// TestNameTakenBySomeoneElse: a snapshot created in advance under the next run's name neither
// stops the run nor becomes the schedule's: the run takes a generated name, and says so.
func TestNameTakenBySomeoneElse(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	s := testSchedule(t0, nil)
	squatter := forged(s, "s-a-51b369cc-20300101t1100z")
	f := newFixture(t, t0.Add(time.Hour), s, testClaim("a"), squatter)
	if err := f.r.sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	generated := "s-a-51b369cc-20300101t1100z-gen2"
	if got, want := f.creates(), []string{squatter.Name, squatter.Name + "-*"}; !reflect.DeepEqual(got, want) {
		t.Errorf("creates %q, want %q", got, want)
	}
	st := f.status(t)
	if got := recordedNames(st); !reflect.DeepEqual(got, []string{generated}) {
		t.Errorf("status.snapshots %q, want %q", got, generated)
	}
	if !st.LastScheduleTime.Equal(ptr.To(metav1.NewTime(t0.Add(time.Hour)))) {
		t.Errorf("lastScheduleTime %v: the run was not taken", st.LastScheduleTime)
	}
	ev := <-f.events.Events
	if want := "Warning NameTaken VolumeSnapshot " + squatter.Name + " exists but this schedule did not create it"; !strings.HasPrefix(ev, want) {
		t.Errorf("event %q, want %q...", ev, want)
	}
}

// TestRecordsOfGoneSnapshots: a record whose snapshot is gone, or whose name holds another object
// now, is dropped, and that other object is left alone.
func TestRecordsOfGoneSnapshots(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	s := testSchedule(t0, func(s *schedulev1alpha1.SnapshotSchedule) {
		s.Spec.Retention = &schedulev1alpha1.Retention{MaxCount: ptr.To(int32(1))}
	})
	ready := &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
	taken(s, "a", t0.Add(-2*time.Hour), ready) // deleted by someone
	replaced := taken(s, "a", t0.Add(-time.Hour), ready)
	replaced.UID = "uid-of-another-object"
	kept := taken(s, "a", t0, ready)
	f := newFixture(t, t0.Add(30*time.Minute), s, testClaim("a"), replaced, kept)
	if err := f.r.sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if got := recordedNames(f.status(t)); !reflect.DeepEqual(got, []string{kept.Name}) {
		t.Errorf("status.snapshots %q, want %q", got, kept.Name)
	}
	if got := f.calls("delete", "volumesnapshots"); len(got) != 0 {
		t.Errorf("deleted %q", got)
	}
}

// TestOwnerReferences: the snapshots carry the schedule's owner reference only with
// deleteSnapshotsWithSchedule: true, and the controller adds or removes it on the snapshots it
// holds when the field changes.
func TestOwnerReferences(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	ownerPatch := `{"metadata":{"ownerReferences":[{"apiVersion":"snapshot.shutter.dev/v1alpha1","controller":true,"kind":"SnapshotSchedule","name":"s","uid":"uid-s"}],"resourceVersion":""}}`
	for _, tc := range []struct {
		name        string
		deleteWith  bool
		ownedBefore bool
		wantOwners  int
		wantPatches []string
	}{
		{name: "default", wantOwners: 0},
		{name: "opted in", deleteWith: true, wantOwners: 1,
			wantPatches: []string{"s-a-51b369cc-20300101t1000z " + ownerPatch}},
		{name: "opted out again", ownedBefore: true, wantOwners: 0,
			wantPatches: []string{`s-a-51b369cc-20300101t1000z {"metadata":{"ownerReferences":null,"resourceVersion":""}}`}},
		{name: "opted in, owned", deleteWith: true, ownedBefore: true, wantOwners: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSchedule(t0, nil)
			s.Spec.DeleteSnapshotsWithSchedule = tc.ownedBefore
			before := taken(s, "a", t0, nil)
			s.Spec.DeleteSnapshotsWithSchedule = tc.deleteWith
			f := newFixture(t, t0.Add(time.Hour), s, testClaim("a"), before)
			if err := f.r.sync(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			if got := f.calls("patch", "volumesnapshots"); !reflect.DeepEqual(got, tc.wantPatches) {
				t.Errorf("patches %q, want %q", got, tc.wantPatches)
			}
			made, err := f.client.SnapshotV1().VolumeSnapshots("ns").Get(context.Background(), "s-a-51b369cc-20300101t1100z", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(made.OwnerReferences) != tc.wantOwners {
				t.Errorf("the new snapshot's owners: %v, want %d", made.OwnerReferences, tc.wantOwners)
			}
		})
	}
}

// TestRecordsAreBounded: status.snapshots holds at most MaxScheduledSnapshots; beyond, the
// oldest records are let go.
func TestRecordsAreBounded(t *testing.T) {
	st := &status{}
	for i := range schedulev1alpha1.MaxScheduledSnapshots {
		st.record(schedulev1alpha1.ScheduledSnapshot{Name: fmt.Sprint("s", i), UID: types.UID(fmt.Sprint("u", i))})
	}
	released := st.record(schedulev1alpha1.ScheduledSnapshot{Name: "new", UID: "u-new"},
		schedulev1alpha1.ScheduledSnapshot{Name: "s5", UID: "u5"}) // recorded already
	if !reflect.DeepEqual(released, []string{"s0"}) {
		t.Errorf("released %q, want [s0]", released)
	}
	if n := len(st.Snapshots); n != 2000 || st.Snapshots[0].Name != "s1" || st.Snapshots[n-1].Name != "new" {
		t.Errorf("%d records, first %s, last %s", n, st.Snapshots[0].Name, st.Snapshots[n-1].Name)
	}
}
