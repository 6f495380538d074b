package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

// batchSize is how many snapshots are in flight when a component is killed.
const batchSize = 50

// TestLeaderElection kills the leading snapshot-controller: the other one takes the Lease over
// and the snapshots created meanwhile become ready.
func TestLeaderElection(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	leader := waitLeader(t, s)
	ns := testenv.Namespace(t, s.Kube)
	newVolume(t, s, ns, "source")
	leader.Kill()
	for i := range 5 {
		createSnapshot(t, s, ns, fmt.Sprintf("snap-%d", i), "source", "")
	}
	next, err := s.WaitLeader(ctx, leader, 30*time.Second)
	if err != nil {
		t.Fatalf("no controller took over from %s: %v", leader.Name, err)
	}
	t.Logf("%s took over from %s", next.Name, leader.Name)
	for i := range 5 {
		waitReady(t, s, ns, fmt.Sprintf("snap-%d", i))
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
}

// TestKillDuringBatch SIGKILLs each component in the middle of a batch of snapshots and starts
// it again: every snapshot becomes ready, and the driver holds exactly one backend snapshot per
// content — none leaked, none duplicated — and none once the batch is deleted.
func TestKillDuringBatch(t *testing.T) {
	s := start(t)
	for _, tc := range []struct {
		name    string
		process func() *stack.Process
	}{
		{"csi-snapshotter", func() *stack.Process { return s.Snapshotter }},
		{"hostpath-driver", func() *stack.Process { return s.Driver }},
		{"snapshot-controller leader", func() *stack.Process {
			p, err := s.Leader(context.Background())
			if err != nil || p == nil {
				t.Fatalf("no leader: %v", err)
			}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testenv.Namespace(t, s.Kube)
			v := newVolume(t, s, ns, "source")
			for i := range batchSize {
				createSnapshot(t, s, ns, fmt.Sprintf("snap-%02d", i), "source", "")
				if i == batchSize/2 {
					restart(t, s, tc.process())
				}
			}
			handles := waitBatch(t, s, ns)
			checkBackend(t, s, v.id, handles)
			deleteBatch(t, s, ns)
			checkBackend(t, s, v.id, nil)
		})
	}
}

// restart SIGKILLs p and starts it again.
// waitLeader waits for the leading snapshot-controller.
func waitLeader(t *testing.T, s *stack.Stack) *stack.Process {
	t.Helper()
	leader, err := s.WaitLeader(context.Background(), nil, 30*time.Second)
	if err != nil {
		t.Fatalf("no leader: %v", err)
	}
	return leader
}

func restart(t *testing.T, s *stack.Stack, p *stack.Process) {
	t.Helper()
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if p == s.Driver {
		if err := s.WaitDriver(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("killed and restarted %s", p.Name)
}

// waitBatch waits until every snapshot in ns is ready and returns their snapshot handles.
func waitBatch(t *testing.T, s *stack.Stack, ns string) map[string]string {
	t.Helper()
	handles := map[string]string{}
	for i := range batchSize {
		vs := waitReady(t, s, ns, fmt.Sprintf("snap-%02d", i))
		content := contentOf(t, s, vs)
		handle := ptr.Deref(content.Status.SnapshotHandle, "")
		if other, dup := handles[handle]; dup {
			t.Errorf("contents %s and %s share backend snapshot %s", other, content.Name, handle)
		}
		handles[handle] = content.Name
	}
	return handles
}

// checkBackend compares the driver's snapshots of volume with the contents' handles.
func checkBackend(t *testing.T, s *stack.Stack, volume string, handles map[string]string) {
	t.Helper()
	snaps, err := s.CSI.ListSnapshots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, snap := range snaps {
		if snap.GetSourceVolumeId() != volume {
			continue
		}
		seen++
		if _, ok := handles[snap.GetSnapshotId()]; !ok {
			t.Errorf("backend snapshot %s of volume %s belongs to no content (leaked or duplicated)", snap.GetSnapshotId(), volume)
		}
	}
	if seen != len(handles) {
		t.Errorf("driver lists %d snapshots of volume %s, contents name %d", seen, volume, len(handles))
	}
}

// deleteBatch deletes every snapshot in ns and waits until they and their contents are gone.
func deleteBatch(t *testing.T, s *stack.Stack, ns string) {
	t.Helper()
	ctx := context.Background()
	snaps := s.Snapshots.SnapshotV1().VolumeSnapshots(ns)
	if err := snaps.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitUntil(t, "batch deleted", readyTimeout, func(ctx context.Context) bool {
		list, err := snaps.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		contents, err := s.Snapshots.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, c := range contents.Items {
			if c.Spec.VolumeSnapshotRef.Namespace == ns {
				return false
			}
		}
		return len(list.Items) == 0
	})
}

// TestGracefulShutdown sends SIGTERM to the leading snapshot-controller and to the sidecar in
// the middle of a batch: each exits 0 within the drain bound, the controller hands the Lease
// back so the other one takes over before the Lease would have expired, and once the sidecar
// is back every snapshot becomes ready with exactly one backend snapshot each.
func TestGracefulShutdown(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	leader := waitLeader(t, s)
	ns := testenv.Namespace(t, s.Kube)
	v := newVolume(t, s, ns, "source")
	for i := range batchSize {
		createSnapshot(t, s, ns, fmt.Sprintf("snap-%02d", i), "source", "")
		if i == batchSize/2 {
			terminate(t, s.Snapshotter)
			stopped := terminate(t, leader)
			next, err := s.WaitLeader(ctx, leader, time.Minute)
			if err != nil {
				t.Fatalf("no controller took over: %v", err)
			}
			// Without the hand-back the Lease would only expire 8 s (LeaseDuration) after the
			// last renewal.
			if took := time.Since(stopped); took >= 7*time.Second {
				t.Errorf("%s took over %s after %s exited: the Lease was not handed back", next.Name, took, leader.Name)
			}
		}
	}
	for _, p := range []*stack.Process{s.Snapshotter, leader} {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	handles := waitBatch(t, s, ns)
	checkBackend(t, s, v.id, handles)
	deleteBatch(t, s, ns)
	checkBackend(t, s, v.id, nil)
}

// terminate sends SIGTERM to p and checks that it exits 0 within the drain bound (15 s, plus
// room for a loaded machine); it returns when p exited.
func terminate(t *testing.T, p *stack.Process) time.Time {
	t.Helper()
	begin := time.Now()
	p.Stop(time.Minute)
	exited := time.Now()
	if err := p.Wait(); err != nil {
		t.Errorf("%s exited with %v after SIGTERM, want status 0\n%s", p.Name, err, p.Tail(20))
	}
	if took := exited.Sub(begin); took > 25*time.Second {
		t.Errorf("%s took %s to exit after SIGTERM", p.Name, took)
	}
	t.Logf("%s exited %s after SIGTERM", p.Name, exited.Sub(begin).Round(time.Millisecond))
	return exited
}
