package sidecar

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// TestStaleListerCausesNoSecondWrite: after the sidecar's own writes, a sync that still sees
// the lister's old copy, and one after the informer caught up, neither call nor write.
func TestStaleListerCausesNoSecondWrite(t *testing.T) {
	f := newFixture(t, config{}, newContent("c"), defaultClass)
	if err := f.syncContent(t, "c"); err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"stale", "caught up"} {
		if step == "caught up" {
			f.catchUp(t, "c")
		}
		if err := f.syncContent(t, "c"); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if n := len(f.patches()); n != 3 || f.csi.CountCalls("CreateSnapshot") != 1 {
			t.Fatalf("%s: %d patches, %v calls; want 3 and one CreateSnapshot", step, n, f.csi.Calls)
		}
	}
}

// TestTimeoutThenSuccess: a create that times out is retried under the same name and leaves
// exactly one backend snapshot.
func TestTimeoutThenSuccess(t *testing.T) {
	f := newFixture(t, config{}, newContent("c"), defaultClass)
	f.csi.Errors["CreateSnapshot"] = []error{status.Error(codes.DeadlineExceeded, "slow"), status.Error(codes.Unavailable, "restarting")}
	for i := range 2 {
		if err := f.syncContent(t, "c"); routed(err) != "retry" {
			t.Fatalf("sync %d: %v, want a retry", i, err)
		}
	}
	if err := f.syncContent(t, "c"); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range f.csi.Requests {
		names[r.Name] = true
	}
	if len(names) != 1 || len(f.csi.SnapshotIDs()) != 1 {
		t.Errorf("requests under %d names, %d backend snapshots; want 1 and 1", len(names), len(f.csi.SnapshotIDs()))
	}
	// annotate once, then status and unannotate once.
	if got := f.patches(); !slices.Equal(got, []string{"", "status", ""}) {
		t.Errorf("patches %q", got)
	}
	hasStatus("snap-snapshot-"+string(testUID), true)(t, f.getContent(t, "c"), f)
}

// TestFinalErrorNotRetriedUntilChanged: after a final create error the content is left alone,
// also on resync, until someone else changes it.
func TestFinalErrorNotRetriedUntilChanged(t *testing.T) {
	f := newFixture(t, config{}, newContent("c"), defaultClass)
	f.csi.Errors["CreateSnapshot"] = []error{status.Error(codes.InvalidArgument, "bad")}
	if err := f.syncContent(t, "c"); routed(err) != "final" {
		t.Fatalf("got %v", err)
	}
	f.catchUp(t, "c")
	if err := f.syncContent(t, "c"); err != nil || f.csi.CountCalls("CreateSnapshot") != 1 {
		t.Fatalf("resync: %v, calls %v", err, f.csi.Calls)
	}
	// The user (or the controller) changes the content: creation is tried again.
	c := f.getContent(t, "c")
	c.Labels = map[string]string{"touched": "yes"}
	c.ResourceVersion = "99"
	if _, err := f.client.SnapshotV1().VolumeSnapshotContents().Update(context.Background(), c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.catchUp(t, "c")
	if err := f.syncContent(t, "c"); err != nil || f.csi.CountCalls("CreateSnapshot") != 2 {
		t.Fatalf("after change: %v, calls %v", err, f.csi.Calls)
	}
}

// TestNotReadyBacksOff: readiness is checked with growing delays and written once it changes.
func TestNotReadyBacksOff(t *testing.T) {
	f := newFixture(t, config{}, newContent("c"), defaultClass)
	f.csi.NotReady = true
	var delays []*controller.Requeue
	for range 5 {
		err := f.syncContent(t, "c")
		wait, ok := controller.AsRequeue(err)
		if !ok {
			t.Fatalf("got %v, want a wait", err)
		}
		delays = append(delays, wait)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, d := range want {
		if delays[i].After != d || delays[i].Reason != "snapshot not ready to use" {
			t.Errorf("check %d: %v, want after %s", i, delays[i], d)
		}
	}
	if n := len(f.patches()); n != 3 {
		t.Errorf("%d patches while not ready, want 3", n)
	}
	f.csi.SetReady()
	if err := f.syncContent(t, "c"); err != nil {
		t.Fatal(err)
	}
	if got := f.patches(); len(got) != 4 || got[3] != "status" {
		t.Errorf("patches %q, want one more status write", got)
	}
	hasStatus("snap-snapshot-"+string(testUID), true)(t, f.getContent(t, "c"), f)
}

// TestDeleteTwiceCallsOnce: a retried deletion after the handle was cleared only releases.
func TestDeleteTwiceCallsOnce(t *testing.T) {
	f := newFixture(t, config{}, newContent("c", markedDeleted, withStatus("h", true)))
	f.csi.Errors["DeleteSnapshot"] = nil
	if err := f.syncContent(t, "c"); err != nil {
		t.Fatal(err)
	}
	if err := f.syncContent(t, "c"); err != nil {
		t.Fatal(err)
	}
	if n := f.csi.CountCalls("DeleteSnapshot"); n != 1 {
		t.Errorf("%d DeleteSnapshot calls, want 1", n)
	}
}

func newGroupContent(name string, opts ...func(groupContent)) groupContent {
	g := &groupv1.VolumeGroupSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: groupv1.VolumeGroupSnapshotContentSpec{
			VolumeGroupSnapshotRef: corevRef("group", testUID),
			DeletionPolicy:         snapshotv1.VolumeSnapshotContentDelete,
			Driver:                 testDriver,
			Source:                 groupv1.VolumeGroupSnapshotContentSource{VolumeHandles: []string{"v1", "v2"}},
		},
	}
	for _, o := range opts {
		o(g)
	}
	return g
}

// TestGroupContent runs a group content through create, a stale resync and deletion on the
// same transitions as single contents.
func TestGroupContent(t *testing.T) {
	f := newFixture(t, config{namePrefix: "groupsnapshot"}, newGroupContent("g"))
	ctx, key := t.Context(), controller.Key{Name: "g"}
	if err := f.group.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := f.group.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	g, err := f.client.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(context.Background(), "g", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantID := "group-groupsnapshot-" + string(testUID)
	if g.Status == nil || ptr.Deref(g.Status.VolumeGroupSnapshotHandle, "") != wantID || !ptr.Deref(g.Status.ReadyToUse, false) ||
		len(g.Status.VolumeSnapshotInfoList) != 2 || g.Status.VolumeSnapshotInfoList[1].VolumeHandle != "v2" || g.Annotations[protocol.AnnGroupBeingCreated] != "" {
		t.Fatalf("group content = %+v", g)
	}
	if got := f.patches(); len(got) != 3 || f.csi.CountCalls("CreateGroupSnapshot") != 1 {
		t.Fatalf("patches %q, calls %v", got, f.csi.Calls)
	}
	g.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	g.Finalizers = []string{protocol.GroupContentBoundFinalizer}
	g.Annotations = map[string]string{protocol.AnnGroupBeingDeleted: "yes"}
	g.ResourceVersion = "50"
	if _, err := f.client.GroupsnapshotV1().VolumeGroupSnapshotContents().Update(context.Background(), g, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.indexer.Update(g)
	if err := f.group.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if f.csi.CountCalls("DeleteGroupSnapshot") != 1 || len(f.csi.GroupIDs()) != 0 {
		t.Errorf("calls %v, groups left %v", f.csi.Calls, f.csi.GroupIDs())
	}
	g, _ = f.client.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(context.Background(), "g", metav1.GetOptions{})
	if len(g.Finalizers) != 0 {
		t.Errorf("after deletion: %+v", g)
	}
}

// TestConflictBeforeCreate: when someone else wrote since the lister's copy, the
// being-created patch conflicts and the driver is not called.
func TestConflictBeforeCreate(t *testing.T) {
	f := newFixture(t, config{}, newContent("c"), defaultClass)
	c := f.getContent(t, "c")
	c.ResourceVersion = "2"
	if _, err := f.client.SnapshotV1().VolumeSnapshotContents().Update(context.Background(), c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := f.syncContent(t, "c")
	if !apierrors.IsConflict(err) || len(f.csi.Calls) != 0 {
		t.Fatalf("got %v and calls %v, want a conflict and no CSI call", err, f.csi.Calls)
	}
}
