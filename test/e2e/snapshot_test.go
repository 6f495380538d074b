package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

// TestDynamicSnapshot takes a snapshot of a claim with a Delete and a Retain class, checks every
// status field and reference, restores it, deletes snapshot and restored claim in both orders,
// and checks what happens to the content and the backend snapshot.
func TestDynamicSnapshot(t *testing.T) {
	s := start(t)
	for _, tc := range []struct {
		policy          snapshotv1.DeletionPolicy
		snapshotFirst   bool
		wantFinalizers  []string
		contentSurvives bool
	}{
		{policy: snapshotv1.VolumeSnapshotContentDelete, snapshotFirst: true,
			wantFinalizers: []string{protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer}},
		{policy: snapshotv1.VolumeSnapshotContentRetain, snapshotFirst: false, contentSurvives: true,
			wantFinalizers: []string{protocol.SnapshotAsSourceFinalizer}},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			ns := testenv.Namespace(t, s.Kube)
			class := "e2e-dynamic-" + ns
			createClass(t, s, class, tc.policy, nil)
			v := newVolume(t, s, ns, "source")
			createSnapshot(t, s, ns, "snap", "source", class)
			vs := waitReady(t, s, ns, "snap")
			content := contentOf(t, s, vs)
			checkDynamic(t, vs, content, v, class, tc.policy)
			for _, f := range tc.wantFinalizers {
				if !hasFinalizer(vs.Finalizers, f) {
					t.Errorf("snapshot finalizers %v lack %s", vs.Finalizers, f)
				}
			}
			handle := ptr.Deref(content.Status.SnapshotHandle, "")
			restored := restoreAndCompare(t, s, v, "snap", handle)
			deleteBoth(t, s, ns, "snap", restored, tc.snapshotFirst)
			checkContentAfterDelete(t, s, content.Name, handle, tc.contentSurvives)
		})
	}
}

func checkDynamic(t *testing.T, vs *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent, v volume,
	class string, policy snapshotv1.DeletionPolicy) {
	t.Helper()
	st := vs.Status
	if want := protocol.ContentName(vs.UID); content.Name != want {
		t.Errorf("content name %s, want %s", content.Name, want)
	}
	if st.CreationTime == nil || st.RestoreSize == nil || st.RestoreSize.Value() != volumeSize || st.Error != nil {
		t.Errorf("snapshot status %+v: want creationTime, restoreSize %d and no error", st, volumeSize)
	}
	ref := content.Spec.VolumeSnapshotRef
	if ref.Name != vs.Name || ref.Namespace != vs.Namespace || ref.UID != vs.UID {
		t.Errorf("content's snapshot ref %+v does not name %s/%s uid %s", ref, vs.Namespace, vs.Name, vs.UID)
	}
	if ptr.Deref(content.Spec.Source.VolumeHandle, "") != v.id || content.Spec.Driver != stack.DefaultDriverName ||
		content.Spec.DeletionPolicy != policy || ptr.Deref(content.Spec.VolumeSnapshotClassName, "") != class {
		t.Errorf("content spec %+v: want volume %s, driver, policy %s, class %s", content.Spec, v.id, policy, class)
	}
	cs := content.Status
	if cs == nil || ptr.Deref(cs.SnapshotHandle, "") == "" || !ptr.Deref(cs.ReadyToUse, false) ||
		ptr.Deref(cs.RestoreSize, 0) != volumeSize || ptr.Deref(cs.CreationTime, 0) == 0 {
		t.Errorf("content status %+v: want handle, ready, restoreSize, creationTime", cs)
	} else if st.CreationTime.UnixNano()/int64(time.Second) != *cs.CreationTime/int64(time.Second) {
		t.Errorf("snapshot creationTime %s, content %d ns", st.CreationTime, *cs.CreationTime)
	}
	if !hasFinalizer(content.Finalizers, protocol.ContentBoundFinalizer) {
		t.Errorf("content finalizers %v lack %s", content.Finalizers, protocol.ContentBoundFinalizer)
	}
}

// deleteBoth deletes the snapshot and the restored claim, in the given order, and waits until
// both are gone.
func deleteBoth(t *testing.T, s *stack.Stack, ns, snapshot string, restored volume, snapshotFirst bool) {
	t.Helper()
	ctx := context.Background()
	snaps := s.Snapshots.SnapshotV1().VolumeSnapshots(ns)
	deleteSnapshot := func() {
		if err := snaps.Delete(ctx, snapshot, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err := stack.WaitGone(ctx, readyTimeout, "snapshot "+snapshot, func(ctx context.Context) error {
			_, err := snaps.Get(ctx, snapshot, metav1.GetOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	deleteClaim := func() {
		if err := stack.DeleteClaim(ctx, s.Kube, restored.claim); err != nil {
			t.Fatal(err)
		}
		if err := s.CSI.DeleteVolume(ctx, restored.id); err != nil {
			t.Fatal(err)
		}
	}
	if snapshotFirst {
		deleteSnapshot()
		deleteClaim()
	} else {
		deleteClaim()
		deleteSnapshot()
	}
}

// checkContentAfterDelete checks that a Delete content and its backend snapshot go, and that a
// Retain content and its backend snapshot stay (then removes the content).
func checkContentAfterDelete(t *testing.T, s *stack.Stack, name, handle string, survives bool) {
	t.Helper()
	ctx := context.Background()
	contents := s.Snapshots.SnapshotV1().VolumeSnapshotContents()
	get := func(ctx context.Context) error {
		_, err := contents.Get(ctx, name, metav1.GetOptions{})
		return err
	}
	if !survives {
		if err := stack.WaitGone(ctx, readyTimeout, "content "+name, get); err != nil {
			t.Fatal(err)
		}
		if backendHas(t, s, handle) {
			t.Errorf("backend snapshot %s survived its Delete content", handle)
		}
		return
	}
	// The snapshot is gone: the controller's sync that dropped its finalizers is the one that
	// hands a Delete content to the sidecar, and it left this one alone.
	content, err := contents.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Retain content: %v", err)
	}
	if content.DeletionTimestamp != nil || content.Annotations[protocol.AnnBeingDeleted] != "" {
		t.Errorf("Retain content handed over for deletion: %+v", content.ObjectMeta)
	}
	if !backendHas(t, s, handle) {
		t.Errorf("backend snapshot %s of a Retain content is gone", handle)
	}
	// Deleted now, only if unchanged since: the sidecar releases it and keeps the backend snapshot.
	if err := contents.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &content.ResourceVersion}}); err != nil {
		t.Fatalf("Retain content changed after its snapshot went: %v", err)
	}
	if err := stack.WaitGone(ctx, readyTimeout, "content "+name, get); err != nil {
		t.Fatal(err)
	}
	if !backendHas(t, s, handle) {
		t.Errorf("backend snapshot %s of a deleted Retain content is gone", handle)
	}
}

// TestPreProvisionedSnapshot binds snapshots to contents an admin made for existing backend
// snapshots, with both deletion policies.
func TestPreProvisionedSnapshot(t *testing.T) {
	s := start(t)
	for _, tc := range []struct {
		policy   snapshotv1.DeletionPolicy
		survives bool
	}{
		{policy: snapshotv1.VolumeSnapshotContentDelete},
		{policy: snapshotv1.VolumeSnapshotContentRetain, survives: true},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			ctx := context.Background()
			ns := testenv.Namespace(t, s.Kube)
			v := newVolume(t, s, ns, "source")
			handle, err := s.CSI.CreateSnapshot(ctx, "e2e-pre-"+ns, v.id)
			if err != nil {
				t.Fatal(err)
			}
			content := &snapshotv1.VolumeSnapshotContent{
				ObjectMeta: metav1.ObjectMeta{Name: "pre-" + ns},
				Spec: snapshotv1.VolumeSnapshotContentSpec{
					Driver: stack.DefaultDriverName, DeletionPolicy: tc.policy,
					Source:            snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To(handle)},
					VolumeSnapshotRef: corev1.ObjectReference{Namespace: ns, Name: "snap"},
				},
			}
			if _, err := s.Snapshots.SnapshotV1().VolumeSnapshotContents().Create(ctx, content, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"},
				Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: ptr.To(content.Name)}}}
			if _, err := s.Snapshots.SnapshotV1().VolumeSnapshots(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			vs = waitReady(t, s, ns, "snap")
			bound := contentOf(t, s, vs)
			if bound.Name != content.Name || bound.Spec.VolumeSnapshotRef.UID != vs.UID {
				t.Errorf("snapshot bound to %s with ref uid %q, want %s and uid %s", bound.Name, bound.Spec.VolumeSnapshotRef.UID, content.Name, vs.UID)
			}
			if ptr.Deref(bound.Status.SnapshotHandle, "") != handle || vs.Status.RestoreSize == nil {
				t.Errorf("content status %+v, snapshot status %+v: want handle %s and a size", bound.Status, vs.Status, handle)
			}
			restored := restoreAndCompare(t, s, v, "snap", handle)
			deleteBoth(t, s, ns, "snap", restored, tc.policy == snapshotv1.VolumeSnapshotContentDelete)
			checkContentAfterDelete(t, s, content.Name, handle, tc.survives)
		})
	}
}

// TestDefaultClass leaves the class out: the chart's default class of the driver is used.
func TestDefaultClass(t *testing.T) {
	s := start(t)
	ns := testenv.Namespace(t, s.Kube)
	newVolume(t, s, ns, "source")
	createSnapshot(t, s, ns, "snap", "source", "")
	content := contentOf(t, s, waitReady(t, s, ns, "snap"))
	if got := ptr.Deref(content.Spec.VolumeSnapshotClassName, ""); got != defaultClass {
		t.Errorf("content class %q, want the default %q", got, defaultClass)
	}
}

func hasFinalizer(finalizers []string, f string) bool {
	for _, x := range finalizers {
		if x == f {
			return true
		}
	}
	return false
}
