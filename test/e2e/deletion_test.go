package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

// groupDeletionRuns is how often TestGroupDeletionLoop runs its scenario.
const groupDeletionRuns = 20

// TestGroupDeletionLoop runs the scenario that used to wedge a group for good: a member of a
// ready group of three is deleted on its own (it is kept), then the group is deleted. Each run
// must end with the group, its members, their contents, the group content and every backend
// snapshot gone. The integration test TestGroupDeletionOrders puts the events in each order
// deterministically; this loop runs the real binaries and deletes the group either at once
// (even runs) or once the member is seen kept by its group (odd runs), so that it meets the
// controller at different points of its work.
func TestGroupDeletionLoop(t *testing.T) {
	s := start(t)
	ns := testenv.Namespace(t, s.Kube)
	labels := map[string]string{"app": "loop"}
	var ids []string
	for _, name := range []string{"data", "log", "wal"} {
		ids = append(ids, newVolume(t, s, ns, name).id)
		labelClaim(t, s, ns, name, labels)
	}
	groups := s.Snapshots.GroupsnapshotV1().VolumeGroupSnapshots(ns)
	for run := range groupDeletionRuns {
		name := fmt.Sprintf("loop-%02d", run)
		testenv.CreateGroupSnapshot(t, s.Snapshots, ns, name, labels)
		vgs := waitGroup(t, s, ns, name, func(g *groupv1.VolumeGroupSnapshot) bool {
			return g != nil && g.Status != nil && ptr.Deref(g.Status.ReadyToUse, false)
		})
		var handles []string
		for _, id := range ids {
			handles = append(handles, ptr.Deref(contentOf(t, s, waitReady(t, s, ns, protocol.MemberSnapshotName(vgs.UID, id))).Status.SnapshotHandle, ""))
		}
		member := protocol.MemberSnapshotName(vgs.UID, ids[run%len(ids)])
		if err := s.Snapshots.SnapshotV1().VolumeSnapshots(ns).Delete(context.Background(), member, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if run%2 == 1 {
			waitMemberKept(t, s, ns, member)
		}
		if err := groups.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGroupGone(t, s, vgs, ids, handles)
	}
}

// waitMemberKept waits until the member deleted on its own is being deleted and still held by its
// group's finalizer.
func waitMemberKept(t *testing.T, s *stack.Stack, ns, member string) {
	t.Helper()
	testenv.WaitFor(t, "member "+member+" deleted alone kept by its group", 30*time.Second, func(ctx context.Context) (*snapshotv1.VolumeSnapshot, error) {
		return s.Snapshots.SnapshotV1().VolumeSnapshots(ns).Get(ctx, member, metav1.GetOptions{})
	}, func(vs *snapshotv1.VolumeSnapshot) bool {
		if vs == nil {
			t.Fatalf("member %s deleted alone is gone: its group did not keep it", member)
		}
		return vs.DeletionTimestamp != nil && slices.Contains(vs.Finalizers, protocol.SnapshotInGroupFinalizer)
	})
}

// waitGroupGone waits until vgs, its members, their contents, its group content and its backend
// snapshots are all gone, and names what is left if they are not.
func waitGroupGone(t *testing.T, s *stack.Stack, vgs *groupv1.VolumeGroupSnapshot, ids, handles []string) {
	t.Helper()
	testenv.WaitFor(t, "group "+vgs.Name+" and all it holds gone", 60*time.Second, func(ctx context.Context) (left []string, err error) {
		if _, err := s.Snapshots.GroupsnapshotV1().VolumeGroupSnapshots(vgs.Namespace).Get(ctx, vgs.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "group "+vgs.Name)
		}
		if _, err := s.Snapshots.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, protocol.GroupContentName(vgs.UID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "group content")
		}
		for _, id := range ids {
			if _, err := s.Snapshots.SnapshotV1().VolumeSnapshots(vgs.Namespace).Get(ctx, protocol.MemberSnapshotName(vgs.UID, id), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "member snapshot of "+id)
			}
			if _, err := s.Snapshots.SnapshotV1().VolumeSnapshotContents().Get(ctx, protocol.MemberContentName(vgs.UID, id), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "member content of "+id)
			}
		}
		snaps, err := s.CSI.ListSnapshots(ctx)
		if err != nil {
			return nil, err
		}
		for _, snap := range snaps {
			if slices.Contains(handles, snap.GetSnapshotId()) {
				left = append(left, "backend snapshot "+snap.GetSnapshotId())
			}
		}
		if len(left) == 0 {
			left = []string{} // read, and nothing left
		}
		return left, nil
	}, func(left []string) bool { return left != nil && len(left) == 0 })
}

// oneClaimSnapshots is how many snapshots TestSnapshotsOfOneClaimTogether takes of one claim.
const oneClaimSnapshots = 200

// TestSnapshotsOfOneClaimTogether creates 200 snapshots of one claim at once and SIGKILLs the
// sidecar and the leading controller once the first 20 are ready. Snapshots of one volume only read it, so the driver
// takes them side by side, and a busy answer is retried within half a second: the last ones
// must not trail the bulk by the tens of seconds a failure's backoff adds. It reports when they
// became ready.
func TestSnapshotsOfOneClaimTogether(t *testing.T) {
	s := start(t)
	ns := testenv.Namespace(t, s.Kube)
	v := newVolume(t, s, ns, "busy")
	readyAt := watchReady(t, s, ns)
	began := time.Now()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < oneClaimSnapshots; i += 4 {
				vs := stack.NewSnapshot(ns, fmt.Sprintf("snap-%03d", i), "busy", "")
				if _, err := s.Snapshots.SnapshotV1().VolumeSnapshots(ns).Create(context.Background(), vs, metav1.CreateOptions{}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	readyAt(oneClaimSnapshots / 10) // the kill lands mid-burst, as in the report this reproduces
	leader, err := s.Leader(context.Background())
	if err != nil || leader == nil {
		t.Fatalf("no leader: %v", err)
	}
	restart(t, s, s.Snapshotter)
	restart(t, s, leader)
	wg.Wait()
	times := readyAt(oneClaimSnapshots)
	slices.SortFunc(times, time.Time.Compare)
	at := func(q float64) time.Duration { return times[int(q*float64(len(times)-1))].Sub(began) }
	t.Logf("%d snapshots of one claim ready after: first %s, p50 %s, p90 %s, p99 %s, last %s; spread %s, last after p90 %s",
		len(times), at(0).Round(10*time.Millisecond), at(0.5).Round(10*time.Millisecond), at(0.9).Round(10*time.Millisecond),
		at(0.99).Round(10*time.Millisecond), at(1).Round(10*time.Millisecond),
		(at(1) - at(0)).Round(10*time.Millisecond), (at(1) - at(0.9)).Round(10*time.Millisecond))
	if tail := at(1) - at(0.9); tail > 5*time.Second {
		t.Errorf("the last snapshots trail: ready %s after the 90th percentile", tail)
	}
	deleteAll(t, s, ns, v.id)
}

// watchReady records when each snapshot in ns is first seen ready; the function it returns waits
// until n are ready and hands back those times.
func watchReady(t *testing.T, s *stack.Stack, ns string) func(n int) []time.Time {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	seen := map[string]time.Time{}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		list, err := s.Snapshots.SnapshotV1().VolumeSnapshots(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for i := range list.Items {
			if _, ok := seen[list.Items[i].Name]; !ok && stack.Ready(&list.Items[i]) {
				seen[list.Items[i].Name] = now
			}
		}
	}, 50*time.Millisecond)
	return func(n int) []time.Time {
		t.Helper()
		testenv.WaitUntil(t, fmt.Sprintf("%d snapshots ready", n), 3*readyTimeout, func(context.Context) bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) >= n
		})
		mu.Lock()
		defer mu.Unlock()
		var out []time.Time
		for _, at := range seen {
			out = append(out, at)
		}
		return out
	}
}

// deleteAll deletes every snapshot in ns and waits until they, their contents and the backend
// snapshots of volume are gone.
func deleteAll(t *testing.T, s *stack.Stack, ns, volume string) {
	t.Helper()
	snaps := s.Snapshots.SnapshotV1().VolumeSnapshots(ns)
	if err := snaps.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitUntil(t, "snapshots of "+volume+" all deleted", 2*readyTimeout, func(ctx context.Context) bool {
		list, err := snaps.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) > 0 {
			return false
		}
		backend, err := s.CSI.ListSnapshots(ctx)
		if err != nil {
			return false
		}
		for _, snap := range backend {
			if snap.GetSourceVolumeId() == volume {
				return false
			}
		}
		return true
	})
}
