package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/testenv"
)

func ready(vs *snapshotv1.VolumeSnapshot) bool {
	return protocol.Ready(vs)
}

func absent(vs *snapshotv1.VolumeSnapshot) bool { return vs == nil }

func errorContains(substr string) func(*snapshotv1.VolumeSnapshot) bool {
	return func(vs *snapshotv1.VolumeSnapshot) bool {
		return vs != nil && vs.Status != nil && vs.Status.Error != nil && vs.Status.Error.Message != nil &&
			strings.Contains(*vs.Status.Error.Message, substr)
	}
}

// TestDynamicSnapshotLifecycle takes a snapshot with a Delete policy and deletes it, checking
// every object on the way and counting the controller's writes. It runs alone, so that the
// counts are this snapshot's.
func TestDynamicSnapshotLifecycle(t *testing.T) {
	f := setup(t)
	driver := "lifecycle.csi.test"
	f.class(t, "lifecycle", driver, snapshotv1.VolumeSnapshotContentDelete, true, map[string]string{
		protocol.ParamSnapshotterSecretName: "secret-${volumesnapshot.name}", protocol.ParamSnapshotterSecretNamespace: "${volumesnapshot.namespace}",
	})
	a := startActor(t, f.client, driver)
	f.volume(t, "data", driver)
	// kube-controller-manager's binding writes to the claim come first, so that none of them
	// races the controller's claim patches into a conflict (a 409 and one more write).
	f.waitClaim(t, "data", bound)

	// Only the requests about this test's objects count: other tests' clean-up may still be
	// under way.
	var contentName string
	mine := func(namespace, name string) bool {
		return namespace == f.ns || name == contentName && contentName != ""
	}
	mark := writes.mark()
	vs := f.snapshot(t, "snap", snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("data")}, "")
	contentName = protocol.ContentName(vs.UID)
	contentSynced := processed.After(t, contentQueue, clusterKey(contentName))
	snapshotSynced := processed.After(t, snapshotQueue, f.key(vs.Name))
	vs = f.waitSnapshot(t, vs.Name, ready)
	// The syncs that saw the end state have made every write of this snapshot's creation.
	snapshotSynced.Until(t, "the snapshot is ready and the claim released", func(controller.Result) bool {
		vs, err := f.client.SnapshotV1().VolumeSnapshots(f.ns).Get(context.Background(), vs.Name, metav1.GetOptions{})
		pvc, perr := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(context.Background(), "data", metav1.GetOptions{})
		return err == nil && perr == nil && ready(vs) && !slices.Contains(pvc.Finalizers, protocol.PVCAsSourceFinalizer)
	})
	contentSynced.Until(t, "the sidecar's report is in", func(controller.Result) bool {
		c, err := f.client.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), contentName, metav1.GetOptions{})
		return err == nil && c.Annotations[protocol.AnnBeingCreated] == "" && protocol.Ready(c)
	})
	created, total := writes.since(mark, mine)
	t.Logf("controller requests, create -> ready: %d (%s)", total, format(created))
	if gets := getsIn(created); gets != 0 {
		t.Errorf("controller made %d single-object GETs for one snapshot; it reads from its caches only", gets)
	}
	if total > 5 {
		t.Errorf("controller made %d writes for one snapshot (create -> ready), want at most 5: %s", total, format(created))
	}

	content, err := f.client.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), protocol.ContentName(vs.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := content.Spec.VolumeSnapshotRef
	switch {
	case ref.Name != vs.Name || ref.Namespace != f.ns || ref.UID != vs.UID:
		t.Errorf("content ref %+v does not point at the snapshot", ref)
	case *content.Spec.Source.VolumeHandle != "vol-"+f.ns+"-data" || content.Spec.Driver != driver:
		t.Errorf("content source %+v driver %s", content.Spec.Source, content.Spec.Driver)
	case content.Spec.DeletionPolicy != snapshotv1.VolumeSnapshotContentDelete || *content.Spec.VolumeSnapshotClassName != "lifecycle":
		t.Errorf("content policy %s class %v", content.Spec.DeletionPolicy, content.Spec.VolumeSnapshotClassName)
	case content.Spec.SourceVolumeMode == nil || *content.Spec.SourceVolumeMode != corev1.PersistentVolumeFilesystem:
		t.Errorf("content sourceVolumeMode %v", content.Spec.SourceVolumeMode)
	case !slices.Contains(content.Finalizers, protocol.ContentBoundFinalizer):
		t.Errorf("content finalizers %v", content.Finalizers)
	case content.Annotations[protocol.AnnDeletionSecretName] != "secret-snap" || content.Annotations[protocol.AnnDeletionSecretNamespace] != f.ns:
		t.Errorf("content deletion secret annotations %v", content.Annotations)
	}
	for _, fin := range []string{protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer} {
		if !slices.Contains(vs.Finalizers, fin) {
			t.Errorf("snapshot finalizers %v lack %s", vs.Finalizers, fin)
		}
	}
	if vs.Spec.VolumeSnapshotClassName == nil || *vs.Spec.VolumeSnapshotClassName != "lifecycle" {
		t.Errorf("the default class was not recorded in the snapshot's spec: %v", vs.Spec.VolumeSnapshotClassName)
	}
	if st := vs.Status; *st.BoundVolumeSnapshotContentName != content.Name || st.RestoreSize.String() != "1Gi" || st.CreationTime == nil || st.Error != nil {
		t.Errorf("snapshot status %+v", st)
	}

	mark = writes.mark()
	f.deleteSnapshot(t, vs.Name)
	f.waitSnapshot(t, vs.Name, absent)
	f.waitContentGone(t, content.Name)
	deleted, total := writes.since(mark, mine)
	t.Logf("controller requests, delete -> gone: %d (%s)", total, format(deleted))
	// One live GET confirms that the snapshot of a content is really gone before its content is
	// released; it is allowed here but not counted as a write.
	total -= getsIn(deleted)
	if getsIn(deleted) > 1 {
		t.Errorf("controller made %d single-object GETs to delete one snapshot, want at most 1", getsIn(deleted))
	}
	if total > 3 {
		t.Errorf("controller made %d writes to delete one snapshot, want at most 3: %s", total, format(deleted))
	}
	if got := a.deletedHandles(); !slices.Equal(got, []string{"backend-" + string(vs.UID)}) {
		t.Errorf("backend snapshots deleted: %v", got)
	}
}

func TestRetainKeepsContent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := f.driverWithClaim(t, "retain", snapshotv1.VolumeSnapshotContentRetain)
	vs := f.readySnapshotOfData(t)
	if slices.Contains(vs.Finalizers, protocol.SnapshotBoundFinalizer) {
		t.Errorf("a Retain snapshot has the bound finalizer: %v", vs.Finalizers)
	}
	looked := processed.After(t, contentQueue, clusterKey(protocol.ContentName(vs.UID)))
	f.deleteSnapshot(t, vs.Name)
	looked.Until(t, "its snapshot is gone", func(controller.Result) bool { return gone(f.getSnapshot(context.Background(), vs.Name)) })
	content, err := f.client.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), protocol.ContentName(vs.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("retained content: %v", err)
	}
	if content.DeletionTimestamp != nil || content.Annotations[protocol.AnnBeingDeleted] != "" || len(a.deletedHandles()) != 0 {
		t.Errorf("retained content was released: %+v", content.ObjectMeta)
	}
	_ = f.client.SnapshotV1().VolumeSnapshotContents().Delete(context.Background(), content.Name, metav1.DeleteOptions{})
	f.waitContentGone(t, content.Name)
}

func TestPreProvisionedBinding(t *testing.T) {
	t.Parallel()
	f := setup(t)
	driver := "preprovisioned.csi.test"
	startActor(t, f.client, driver)
	contentName := "imported-" + f.ns
	testenv.Create(t, f.client.SnapshotV1().VolumeSnapshotContents(), &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: contentName},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Name: "imported", Namespace: f.ns},
			DeletionPolicy:    snapshotv1.VolumeSnapshotContentDelete, Driver: driver,
			Source: snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To("existing-1")},
		},
	})
	// A snapshot naming a content that points elsewhere is refused.
	f.snapshot(t, "other", snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: &contentName}, "")
	f.waitSnapshot(t, "other", errorContains("is bound to VolumeSnapshot "+f.ns+"/imported"))

	vs := f.waitSnapshot(t, f.snapshot(t, "imported", snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: &contentName}, "").Name, ready)
	content, err := f.client.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), contentName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if content.Spec.VolumeSnapshotRef.UID != vs.UID || !slices.Contains(content.Finalizers, protocol.ContentBoundFinalizer) {
		t.Errorf("content not bound: ref %+v finalizers %v", content.Spec.VolumeSnapshotRef, content.Finalizers)
	}
	f.deleteSnapshot(t, vs.Name)
	f.waitContentGone(t, contentName)
}

// TestBadInputRecovers walks through user errors: each is reported in status and an event,
// and the snapshot proceeds once the cause is fixed.
func TestBadInputRecovers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	driver := "errors.csi.test"
	startActor(t, f.client, driver)

	vs := f.snapshot(t, "snap", snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("late")}, "")
	f.waitSnapshot(t, vs.Name, errorContains("source PersistentVolumeClaim late does not exist"))
	f.class(t, "errors-a", driver, snapshotv1.VolumeSnapshotContentDelete, true, nil)
	f.class(t, "errors-b", driver, snapshotv1.VolumeSnapshotContentDelete, true, nil)
	f.volume(t, "late", driver)
	// Upstream's wording, which tools and Kubernetes' e2e tests look for, then ours.
	f.waitSnapshot(t, vs.Name, errorContains("2 default snapshot classes were found: driver errors.csi.test has 2 default VolumeSnapshotClasses"))
	if err := f.client.SnapshotV1().VolumeSnapshotClasses().Delete(context.Background(), "errors-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitSnapshot(t, vs.Name, ready)

	f.volume(t, "classless", "noclass.csi.test")
	f.snapshot(t, "classless", snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("classless")}, "")
	f.waitSnapshot(t, "classless", errorContains("cannot find default snapshot class: no VolumeSnapshotClass is named and driver noclass.csi.test has no default class"))
	f.snapshot(t, "wrong-class", snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("classless")}, "errors-a")
	f.waitSnapshot(t, "wrong-class", errorContains("VolumeSnapshotClass errors-a is for driver errors.csi.test"))

	events, err := f.kube.CoreV1().Events(f.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]bool{}
	for _, e := range events.Items {
		reasons[e.Reason+"/"+e.Type] = true
	}
	for _, want := range []string{"InvalidSnapshotSource/Warning", "InvalidSnapshotClass/Warning"} {
		if !reasons[want] {
			t.Errorf("no %s event; got %v", want, reasons)
		}
	}
	if reasons["SnapshotReady/Normal"] {
		t.Error("a SnapshotReady event was recorded without --ready-events")
	}

	f.class(t, "errors-secret", "secret.csi.test", snapshotv1.VolumeSnapshotContentDelete, false, map[string]string{
		protocol.ParamSnapshotterSecretName: "${pvc.name}", protocol.ParamSnapshotterSecretNamespace: "ns",
	})
	f.volume(t, "other", "secret.csi.test")
	f.snapshot(t, "bad-secret", snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("other")}, "errors-secret")
	f.waitSnapshot(t, "bad-secret", errorContains("${pvc.name} is not allowed here"))
}

// TestNoDeletionWhileBeingCreated holds the backend in the being-created state and deletes the
// snapshot: the content must wait until the backend has answered.
func TestNoDeletionWhileBeingCreated(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a, vs := f.heldSnapshotOfData(t, "slow")
	name := protocol.ContentName(vs.UID)
	testenv.WaitFor(t, "content "+name+" being created", 30*time.Second, func(ctx context.Context) (*snapshotv1.VolumeSnapshotContent, error) {
		return f.client.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{})
	}, func(c *snapshotv1.VolumeSnapshotContent) bool {
		return c != nil && c.Annotations[protocol.AnnBeingCreated] != ""
	})
	waiting := processed.After(t, snapshotQueue, f.key(vs.Name))
	f.deleteSnapshot(t, vs.Name)
	waiting.Until(t, "the deletion waits for the content being created", func(r controller.Result) bool {
		wait, ok := controller.AsRequeue(r.Err)
		return ok && wait.Reason == "content is still being created"
	})
	c, err := f.client.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || c.DeletionTimestamp != nil {
		t.Fatalf("content deleted while being created: %v %+v", err, c)
	}
	a.setHold(false)
	f.waitSnapshot(t, vs.Name, absent)
	f.waitBackendDeleted(t, a, name)
}

func getsIn(counts map[string]int) int {
	n := 0
	for k, v := range counts {
		if strings.HasPrefix(k, "GET ") {
			n += v
		}
	}
	return n
}
