package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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
	leader, err := s.WaitLeader(ctx, nil, 30*time.Second)
	if err != nil {
		t.Fatalf("no leader: %v", err)
	}
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
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := snaps.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		contents, err := s.Snapshots.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range contents.Items {
			if c.Spec.VolumeSnapshotRef.Namespace == ns {
				return false, nil
			}
		}
		return len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("batch not deleted: %v", err)
	}
}
