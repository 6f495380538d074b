package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/controller/controllertest"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/testenv"
)

// groupRun is one group snapshot of the deletion-order test and what the test knows of it.
type groupRun struct {
	f       *fixture
	name    string
	uid     types.UID
	handles []string // volume handles of the members
}

func (r *groupRun) key() controller.Key { return controller.Key{Namespace: r.f.ns, Name: r.name} }

func (r *groupRun) member(i int) string {
	return protocol.MemberSnapshotName(r.uid, r.handles[i])
}

// members returns the member snapshots the API holds.
func (r *groupRun) members(t *testing.T) []*snapshotv1.VolumeSnapshot {
	var out []*snapshotv1.VolumeSnapshot
	for i := range r.handles {
		vs, err := r.f.client.SnapshotV1().VolumeSnapshots(r.f.ns).Get(context.Background(), r.member(i), metav1.GetOptions{})
		if err == nil {
			out = append(out, vs)
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	return out
}

// deleteMember deletes the first member as a user would; it may be gone already.
func (r *groupRun) deleteMember(t *testing.T) {
	err := r.f.client.SnapshotV1().VolumeSnapshots(r.f.ns).Delete(context.Background(), r.member(0), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// deleteGroup deletes the group and waits for the controller's first sync of it after that.
// With letGo it waits for the sync that has let the members go: every member left is being
// deleted without the in-group finalizer, or the group is gone.
func (r *groupRun) deleteGroup(t *testing.T, letGo bool) {
	synced := processed.After(t, groupQueue, r.key())
	if err := r.f.client.GroupsnapshotV1().VolumeGroupSnapshots(r.f.ns).Delete(context.Background(), r.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	synced.Until(t, "the group let its members go", func(controller.Result) bool {
		if !letGo {
			return true
		}
		if _, err := r.f.client.GroupsnapshotV1().VolumeGroupSnapshots(r.f.ns).Get(context.Background(), r.name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return true
		}
		for _, vs := range r.members(t) {
			if vs.DeletionTimestamp == nil || slices.Contains(vs.Finalizers, protocol.SnapshotInGroupFinalizer) {
				return false
			}
		}
		return true
	})
}

// waitMembersCreated waits until the group's sync has created every member snapshot.
func (r *groupRun) waitMembersCreated(t *testing.T, synced *controllertest.Watch) {
	synced.Until(t, "the members exist", func(controller.Result) bool {
		vgs, err := r.f.client.GroupsnapshotV1().VolumeGroupSnapshots(r.f.ns).Get(context.Background(), r.name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		r.uid = vgs.UID
		return len(r.members(t)) == len(r.handles)
	})
}

// waitGone waits until the group, its members, their contents and the group content are gone,
// and checks that the backend group snapshot was deleted once and no member alone.
func (r *groupRun) waitGone(t *testing.T, a *actor) {
	t.Helper()
	r.f.waitGroup(t, r.name, groupAbsent)
	for i := range r.handles {
		r.f.waitSnapshot(t, r.member(i), absent)
		r.f.waitContentGone(t, protocol.MemberContentName(r.uid, r.handles[i]))
	}
	r.f.waitGroupContentGone(t, protocol.GroupContentName(r.uid))
	var mine []string
	for _, h := range a.deletedHandles() {
		if strings.HasPrefix(h, "group-"+string(r.uid)) {
			mine = append(mine, h)
		}
	}
	if want := []string{"group-" + string(r.uid)}; !slices.Equal(mine, want) {
		t.Errorf("backend deletions %v, want %v", mine, want)
	}
}

// TestGroupDeletionOrders deletes a group snapshot and one of its members in every order, with
// and without a controller restart in between, holding back the controller's snapshot events
// where the order depends on when it sees them. Every order must end with everything gone and
// the backend group snapshot deleted once. It runs alone: it holds the package controller's
// watch and restarts it.
func TestGroupDeletionOrders(t *testing.T) {
	f := setup(t)
	driver, a := f.groupDriver(t, "grouporder", snapshotv1.VolumeSnapshotContentDelete)
	labels := map[string]string{"app": "ordered"}
	handles := f.labelledClaims(t, driver, labels, "data", "log", "wal")
	restart := func(t *testing.T, on bool) {
		if on {
			running.restart(t)
		}
	}
	tests := []struct {
		name string
		run  func(t *testing.T, r *groupRun, restarted bool)
	}{
		{name: "member then group", run: func(t *testing.T, r *groupRun, restarted bool) {
			r.ready(t, labels)
			r.graceOver(t)
			kept := processed.After(t, snapshotQueue, controller.Key{Namespace: f.ns, Name: r.member(0)})
			r.deleteMember(t)
			kept.Until(t, "the member deleted alone is kept", func(controller.Result) bool { return r.memberHeld(t) })
			restart(t, restarted)
			// The wedge: the sync that lets the member go must be over before the
			// controller sees the member change that this sync made itself.
			gate.hold(t)
			r.deleteGroup(t, true)
			gate.release()
		}},
		{name: "group then member", run: func(t *testing.T, r *groupRun, restarted bool) {
			r.ready(t, labels)
			gate.hold(t)
			r.deleteGroup(t, true)
			restart(t, restarted)
			r.deleteMember(t)
			gate.release()
		}},
		{name: "both at once", run: func(t *testing.T, r *groupRun, restarted bool) {
			r.ready(t, labels)
			gate.hold(t)
			r.deleteMember(t)
			r.deleteGroup(t, false)
			restart(t, restarted)
			gate.release()
		}},
		{name: "member while the group is created", run: func(t *testing.T, r *groupRun, restarted bool) {
			gate.hold(t)
			synced := processed.After(t, groupQueue, r.key())
			f.groupSnapshot(t, r.name, labels)
			r.waitMembersCreated(t, synced)
			r.deleteMember(t)
			restart(t, restarted)
			// Without a restart the controller has not seen its own members yet.
			r.deleteGroup(t, false)
			gate.release()
		}},
	}
	for i, tc := range tests {
		for _, restarted := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/restart=%v", tc.name, restarted), func(t *testing.T) {
				r := &groupRun{f: f, name: fmt.Sprintf("order-%d-%v", i, restarted), handles: handles}
				tc.run(t, r, restarted)
				r.waitGone(t, a)
			})
		}
	}
}

// ready creates the group and waits until it and its members are ready.
func (r *groupRun) ready(t *testing.T, labels map[string]string) {
	vgs := r.f.waitGroup(t, r.f.groupSnapshot(t, r.name, labels).Name, groupReady)
	r.uid = vgs.UID
	for i := range r.handles {
		r.f.waitSnapshot(t, r.member(i), ready)
	}
}

// statusGrace is the package controller's StatusGrace.
const statusGrace = 5 * time.Second

// graceOver waits until the controller's status grace for the first member's content is over:
// a member synced before its content had a status is looked at again once the grace ends, and
// that timer, not an event, would then let a wedged member go. The report this reproduces
// deleted the group ten seconds after the member. (Creation times have whole seconds: one more.)
func (r *groupRun) graceOver(t *testing.T) {
	content, err := r.f.client.SnapshotV1().VolumeSnapshotContents().Get(context.Background(),
		protocol.MemberContentName(r.uid, r.handles[0]), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	over := content.CreationTimestamp.Add(statusGrace + time.Second)
	testenv.WaitUntil(t, "status grace of "+content.Name+" over", statusGrace+5*time.Second,
		func(context.Context) bool { return time.Now().After(over) })
}

// memberHeld tells whether the first member is being deleted and still held by its group.
func (r *groupRun) memberHeld(t *testing.T) bool {
	vs, err := r.f.client.SnapshotV1().VolumeSnapshots(r.f.ns).Get(context.Background(), r.member(0), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("member deleted alone: %v", err)
	}
	return vs.DeletionTimestamp != nil && slices.Contains(vs.Finalizers, protocol.SnapshotInGroupFinalizer)
}

func (f *fixture) waitGroupContentGone(t *testing.T, name string) {
	t.Helper()
	waitGone(t, "group content "+name, func(ctx context.Context) error {
		_, err := f.client.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, name, metav1.GetOptions{})
		return err
	})
}
