package e2e

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

// TestGroupSnapshot snapshots three claims together with the chart's default group class, with
// the sidecar killed and restarted right after the request: the group becomes ready once, with
// deterministically named members whose data restores exactly; a member cannot be deleted alone;
// deleting the group removes members, contents and the backend snapshots.
func TestGroupSnapshot(t *testing.T) {
	s := start(t)
	ns := testenv.Namespace(t, s.Kube)
	labels := map[string]string{"app": "db"}
	volumes := map[string]volume{}
	for _, name := range []string{"data", "log", "wal"} {
		v := newVolume(t, s, ns, name)
		labelClaim(t, s, ns, name, labels)
		volumes[v.id] = v
	}
	groups := s.Snapshots.GroupsnapshotV1().VolumeGroupSnapshots(ns)
	vgs := testenv.CreateGroupSnapshot(t, s.Snapshots, ns, "db", labels)
	restart(t, s, s.Snapshotter)
	vgs = waitGroup(t, s, ns, "db", func(g *groupv1.VolumeGroupSnapshot) bool {
		return g != nil && g.Status != nil && ptr.Deref(g.Status.ReadyToUse, false)
	})

	handles := map[string]string{} // member snapshot handle -> source volume id
	for id, v := range volumes {
		member := waitReady(t, s, ns, protocol.MemberSnapshotName(vgs.UID, id))
		if ptr.Deref(member.Status.VolumeGroupSnapshotName, "") != "db" || !hasFinalizer(member.Finalizers, protocol.SnapshotInGroupFinalizer) {
			t.Errorf("member %s: status %+v finalizers %v", member.Name, member.Status, member.Finalizers)
		}
		content := contentOf(t, s, member)
		if content.Name != protocol.MemberContentName(vgs.UID, id) || content.Annotations[protocol.AnnGroupSnapshotHandle] == "" {
			t.Errorf("member content %s annotations %v", content.Name, content.Annotations)
		}
		handle := ptr.Deref(content.Status.SnapshotHandle, "")
		handles[handle] = id
		restored := restoreAndCompare(t, s, v, member.Name, handle)
		if err := stack.DeleteClaim(context.Background(), s.Kube, restored.claim); err != nil {
			t.Fatal(err)
		}
	}
	checkOneSnapshotPerVolume(t, s, volumes)

	first := protocol.MemberSnapshotName(vgs.UID, volumes[firstKey(volumes)].id)
	member := watchHistory(t, s.Snapshots.SnapshotV1().VolumeSnapshots(ns).Watch, first)
	group := watchHistory(t, groups.Watch, "db")
	if err := s.Snapshots.SnapshotV1().VolumeSnapshots(ns).Delete(context.Background(), first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := groups.Delete(context.Background(), "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGroup(t, s, ns, "db", func(g *groupv1.VolumeGroupSnapshot) bool { return g == nil })
	// The member deleted alone was kept by its group: it let go of its in-group finalizer only
	// after the group's deletion began.
	checkAfter(t, "the release of the member deleted alone", member.first(t, "the member is released", released(protocol.SnapshotInGroupFinalizer)),
		"the group's deletion", group.first(t, "the group is being deleted", deleting))
	testenv.WaitUntil(t, "group content and backend snapshots gone after deleting the group", readyTimeout, func(ctx context.Context) bool {
		for handle := range handles {
			if backendHas(t, s, handle) {
				return false
			}
		}
		_, err := s.Snapshots.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, protocol.GroupContentName(vgs.UID), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	for id := range volumes {
		if _, err := s.Snapshots.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), protocol.MemberContentName(vgs.UID, id), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("member content of %s left: %v", id, err)
		}
	}
}

// TestGroupSnapshotBadSelection checks the errors of a selector that matches nothing and of a
// matching claim that is not bound.
func TestGroupSnapshotBadSelection(t *testing.T) {
	s := start(t)
	ns := testenv.Namespace(t, s.Kube)
	testenv.CreateGroupSnapshot(t, s.Snapshots, ns, "nothing", map[string]string{"app": "none"})
	waitGroup(t, s, ns, "nothing", groupErrorIs("matches no PersistentVolumeClaim"))
	unboundClaim(t, s, ns)
	labelClaim(t, s, ns, "source", map[string]string{"app": "late"})
	testenv.CreateGroupSnapshot(t, s.Snapshots, ns, "late", map[string]string{"app": "late"})
	waitGroup(t, s, ns, "late", groupErrorIs("is not bound yet"))
}

func groupErrorIs(substr string) func(*groupv1.VolumeGroupSnapshot) bool {
	return func(g *groupv1.VolumeGroupSnapshot) bool {
		return g != nil && g.Status != nil && g.Status.Error != nil && strings.Contains(ptr.Deref(g.Status.Error.Message, ""), substr)
	}
}

func waitGroup(t *testing.T, s *stack.Stack, ns, name string, ok func(*groupv1.VolumeGroupSnapshot) bool) *groupv1.VolumeGroupSnapshot {
	t.Helper()
	return testenv.WaitFor(t, "group snapshot "+ns+"/"+name, readyTimeout, func(ctx context.Context) (*groupv1.VolumeGroupSnapshot, error) {
		return s.Snapshots.GroupsnapshotV1().VolumeGroupSnapshots(ns).Get(ctx, name, metav1.GetOptions{})
	}, ok)
}

func labelClaim(t *testing.T, s *stack.Stack, ns, name string, labels map[string]string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc, err := s.Kube.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pvc.Labels = labels
		_, err = s.Kube.CoreV1().PersistentVolumeClaims(ns).Update(context.Background(), pvc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkOneSnapshotPerVolume checks that the backend holds exactly one snapshot of each volume:
// the sidecar's restart during creation made no second group snapshot.
func checkOneSnapshotPerVolume(t *testing.T, s *stack.Stack, volumes map[string]volume) {
	t.Helper()
	snaps, err := s.CSI.ListSnapshots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, snap := range snaps {
		if _, ok := volumes[snap.GetSourceVolumeId()]; ok {
			count[snap.GetSourceVolumeId()]++
		}
	}
	for id := range volumes {
		if count[id] != 1 {
			t.Errorf("backend holds %d snapshots of volume %s, want 1", count[id], id)
		}
	}
}

func firstKey(m map[string]volume) string {
	for k := range m {
		return k
	}
	return ""
}
