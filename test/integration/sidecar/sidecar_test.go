package sidecar

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/testenv"
)

type contentOption func(*snapshotv1.VolumeSnapshotContent)

// createContent creates a content as the snapshot controller would: bound to a snapshot with a
// fresh uid, with the bound finalizer, for the harness's driver.
func (h *harness) createContent(t *testing.T, source snapshotv1.VolumeSnapshotContentSource, opts ...contentOption) *snapshotv1.VolumeSnapshotContent {
	t.Helper()
	uid := uuid.NewUUID()
	c := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: protocol.ContentName(uid), Finalizers: []string{protocol.ContentBoundFinalizer}},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Name: "snap", Namespace: "default", UID: uid},
			DeletionPolicy:    snapshotv1.VolumeSnapshotContentDelete,
			Driver:            h.driverName,
			Source:            source,
		},
	}
	for _, o := range opts {
		o(c)
	}
	c, err := h.client.SnapshotV1().VolumeSnapshotContents().Create(t.Context(), c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.forceDelete(c.Name) })
	return c
}

// forceDelete removes a content left by a failed test.
func (h *harness) forceDelete(name string) {
	ctx := context.Background()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	_, _ = h.client.SnapshotV1().VolumeSnapshotContents().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	_ = h.client.SnapshotV1().VolumeSnapshotContents().Delete(ctx, name, metav1.DeleteOptions{})
}

func (h *harness) createClass(t *testing.T, params map[string]string) string {
	t.Helper()
	class := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "it-"}, Driver: h.driverName,
		Parameters: params, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	class, err := h.client.SnapshotV1().VolumeSnapshotClasses().Create(t.Context(), class, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.client.SnapshotV1().VolumeSnapshotClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	return class.Name
}

// waitContent waits until cond holds for the content (nil once it is gone).
func (h *harness) waitContent(t *testing.T, name, what string, cond func(*snapshotv1.VolumeSnapshotContent) bool) *snapshotv1.VolumeSnapshotContent {
	t.Helper()
	return testenv.WaitFor(t, "content "+name+" never "+what, 30*time.Second, func(ctx context.Context) (*snapshotv1.VolumeSnapshotContent, error) {
		return h.client.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{})
	}, cond)
}

// getContent reads the content; nil once it is gone.
func (h *harness) getContent(t *testing.T, name string) *snapshotv1.VolumeSnapshotContent {
	t.Helper()
	c, err := h.client.SnapshotV1().VolumeSnapshotContents().Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ready(c *snapshotv1.VolumeSnapshotContent) bool {
	return c != nil && c.Status != nil && ptr.Deref(c.Status.ReadyToUse, false) && c.Annotations[protocol.AnnBeingCreated] == ""
}

func gone(c *snapshotv1.VolumeSnapshotContent) bool { return c == nil }

// markDeleted plays the controller's part when the snapshot is deleted: being-deleted, the
// deletion secret, then delete.
func (h *harness) markDeleted(t *testing.T, name string, secret *types.NamespacedName) {
	t.Helper()
	ann := map[string]string{protocol.AnnBeingDeleted: "yes"}
	if secret != nil {
		ann[protocol.AnnDeletionSecretName], ann[protocol.AnnDeletionSecretNamespace] = secret.Name, secret.Namespace
	}
	c := h.getContent(t, name)
	for k, v := range ann {
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, k, v)
	}
	if _, err := h.client.SnapshotV1().VolumeSnapshotContents().Update(t.Context(), c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.client.SnapshotV1().VolumeSnapshotContents().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deleteContent deletes the content as the controller would (see markDeleted), waits until it is
// gone, and checks that the driver is then left with want snapshots of volume.
func (h *harness) deleteContent(t *testing.T, name string, secret *types.NamespacedName, volume string, want int) {
	t.Helper()
	h.markDeleted(t, name, secret)
	h.waitContent(t, name, "gone", gone)
	if snaps := h.backendSnapshots(t, volume); len(snaps) != want {
		t.Errorf("backend snapshots of %s after deleting %s: %v, want %d", volume, name, snaps, want)
	}
}

func (h *harness) createSecret(t *testing.T, ns, name string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{"token": ns + "/" + name}}
	if _, err := h.kube.CoreV1().Secrets(ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestDynamicWithSecrets: a dynamic content with class secrets is created, becomes ready and
// is deleted with the deletion secret; the sidecar's writes are counted for each half.
func TestDynamicWithSecrets(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 10*time.Second)
	ns := testenv.Namespace(t, h.kube)
	h.createSecret(t, ns, "snap-creds")
	h.createSecret(t, ns, "delete-creds")
	class := h.createClass(t, map[string]string{
		protocol.ParamSnapshotterSecretName:      "${volumesnapshot.name}-creds",
		protocol.ParamSnapshotterSecretNamespace: ns,
	})
	vol := h.createVolume(t, "vol-dynamic")
	c := h.createContent(t, snapshotv1.VolumeSnapshotContentSource{VolumeHandle: &vol}, func(c *snapshotv1.VolumeSnapshotContent) {
		c.Spec.VolumeSnapshotClassName = &class
	})
	synced := h.processed.After(t, contentQueue, controller.Key{Name: c.Name})
	c = h.waitContent(t, c.Name, "ready", ready)
	snaps := h.backendSnapshots(t, vol)
	if len(snaps) != 1 || snaps[0].GetSnapshotId() != *c.Status.SnapshotHandle || *c.Status.RestoreSize != snaps[0].GetSizeBytes() || c.Status.CreationTime == nil {
		t.Fatalf("backend %v, status %+v", snaps, c.Status)
	}
	if got := h.proxy.secretsOf(csi.Controller_CreateSnapshot_FullMethodName)["token"]; got != ns+"/snap-creds" {
		t.Errorf("CreateSnapshot got secret %q", got)
	}
	// A successful sync of the ready content leaves nothing to do: no requeue, and the
	// sidecar's own writes bring no event back.
	synced.Until(t, "it ended with the content ready", func(r controller.Result) bool {
		return r.Outcome == controller.OutcomeSuccess && ready(h.getContent(t, c.Name))
	})
	created := h.writes.take(c.Name)
	t.Logf("sidecar writes to create a snapshot: %d %v", len(created), created)
	if want := []string{"PATCH ", "PATCH status", "PATCH "}; !slices.Equal(created, want) {
		t.Errorf("create writes %v, want %v", created, want)
	}

	h.deleteContent(t, c.Name, &types.NamespacedName{Namespace: ns, Name: "delete-creds"}, vol, 0)
	if got := h.proxy.secretsOf(csi.Controller_DeleteSnapshot_FullMethodName)["token"]; got != ns+"/delete-creds" {
		t.Errorf("DeleteSnapshot got secret %q", got)
	}
	deleted := h.writes.take(c.Name)
	t.Logf("sidecar writes to delete a snapshot: %d %v", len(deleted), deleted)
	if want := []string{"PATCH "}; !slices.Equal(deleted, want) {
		t.Errorf("delete writes %v, want %v", deleted, want)
	}
}

// TestMissingSecret: a missing secret is a status error; creating it lets the snapshot through.
func TestMissingSecret(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 10*time.Second)
	ns := testenv.Namespace(t, h.kube)
	class := h.createClass(t, map[string]string{protocol.ParamSnapshotterSecretName: "late", protocol.ParamSnapshotterSecretNamespace: ns})
	vol := h.createVolume(t, "vol-secret")
	c := h.createContent(t, snapshotv1.VolumeSnapshotContentSource{VolumeHandle: &vol}, func(c *snapshotv1.VolumeSnapshotContent) {
		c.Spec.VolumeSnapshotClassName = &class
	})
	h.waitContent(t, c.Name, "reporting the missing secret", func(c *snapshotv1.VolumeSnapshotContent) bool {
		return c.Status != nil && c.Status.Error != nil && strings.Contains(*c.Status.Error.Message, "cannot read secret "+ns+"/late")
	})
	h.createSecret(t, ns, "late")
	c = h.waitContent(t, c.Name, "ready", ready)
	if c.Status.Error != nil {
		t.Errorf("error left in status: %s", *c.Status.Error.Message)
	}
}

// TestRetain: deleting a Retain content only releases it; the backend snapshot stays.
func TestRetain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 10*time.Second)
	vol := h.createVolume(t, "vol-retain")
	c := h.createContent(t, snapshotv1.VolumeSnapshotContentSource{VolumeHandle: &vol}, func(c *snapshotv1.VolumeSnapshotContent) {
		c.Spec.DeletionPolicy = snapshotv1.VolumeSnapshotContentRetain
	})
	h.waitContent(t, c.Name, "ready", ready)
	h.deleteContent(t, c.Name, nil, vol, 1)
}

// TestPreProvisioned: a content naming an existing backend snapshot gets its status; one
// naming an unknown handle gets a status error.
func TestPreProvisioned(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 10*time.Second)
	vol := h.createVolume(t, "vol-pre")
	c := h.createContent(t, snapshotv1.VolumeSnapshotContentSource{VolumeHandle: &vol})
	c = h.waitContent(t, c.Name, "ready", ready)
	handle := *c.Status.SnapshotHandle

	imported := h.createContent(t, snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: &handle}, func(c *snapshotv1.VolumeSnapshotContent) {
		c.Spec.DeletionPolicy = snapshotv1.VolumeSnapshotContentRetain
	})
	imported = h.waitContent(t, imported.Name, "ready", ready)
	if *imported.Status.SnapshotHandle != handle || *imported.Status.RestoreSize != 1<<20 {
		t.Errorf("imported status %+v", imported.Status)
	}
	unknown := "snap-0000000000000000000000000000000000000000"
	bad := h.createContent(t, snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: &unknown})
	h.waitContent(t, bad.Name, "reporting the unknown handle", func(c *snapshotv1.VolumeSnapshotContent) bool {
		return c.Status != nil && c.Status.Error != nil && strings.Contains(*c.Status.Error.Message, "does not know")
	})
}

// TestTimeoutThenSuccess: the driver finishes CreateSnapshot after the sidecar's timeout. The
// sidecar keeps being-created, retries under the same name, and ends with exactly one backend
// snapshot, the one in status.
func TestTimeoutThenSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 500*time.Millisecond)
	h.proxy.answerLate(2)
	vol := h.createVolume(t, "vol-slow")
	c := h.createContent(t, snapshotv1.VolumeSnapshotContentSource{VolumeHandle: &vol})
	h.waitContent(t, c.Name, "marked being-created", func(c *snapshotv1.VolumeSnapshotContent) bool {
		return c.Annotations[protocol.AnnBeingCreated] == "yes" && c.Status == nil
	})
	c = h.waitContent(t, c.Name, "ready", ready)
	snaps := h.backendSnapshots(t, vol)
	if len(snaps) != 1 || snaps[0].GetSnapshotId() != *c.Status.SnapshotHandle {
		t.Fatalf("backend snapshots %v, status %+v", snaps, c.Status)
	}
	h.proxy.mu.Lock()
	creates := h.proxy.creates
	h.proxy.mu.Unlock()
	if creates < 3 {
		t.Errorf("%d CreateSnapshot calls, want at least 3 (two timed out)", creates)
	}
	t.Logf("sidecar writes with two timeouts: %v", h.writes.take(c.Name))

	// Deleting while being-created is set waits for the create to finish: nothing leaks.
	h.proxy.answerLate(1)
	vol2 := h.createVolume(t, "vol-slow-2")
	c2 := h.createContent(t, snapshotv1.VolumeSnapshotContentSource{VolumeHandle: &vol2})
	h.waitContent(t, c2.Name, "marked being-created", func(c *snapshotv1.VolumeSnapshotContent) bool {
		return c.Annotations[protocol.AnnBeingCreated] == "yes"
	})
	h.deleteContent(t, c2.Name, nil, vol2, 0)
}

// TestDriverRestart: the driver (and the socket the sidecar talks to) restarts while
// CreateSnapshot is in flight; the sidecar's call fails, it keeps being-created, reconnects,
// retries and ends with one backend snapshot.
func TestDriverRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2*time.Second)
	hold := make(chan struct{})
	h.proxy.mu.Lock()
	h.proxy.hold = hold
	h.proxy.mu.Unlock()
	vol := h.createVolume(t, "vol-restart")
	c := h.createContent(t, snapshotv1.VolumeSnapshotContentSource{VolumeHandle: &vol})
	h.waitContent(t, c.Name, "marked being-created", func(c *snapshotv1.VolumeSnapshotContent) bool {
		return c.Annotations[protocol.AnnBeingCreated] == "yes"
	})
	// Restart only once the call is held at the proxy: in flight, the backend already working.
	testenv.WaitUntil(t, "CreateSnapshot reaches the driver", 10*time.Second, func(context.Context) bool {
		h.proxy.mu.Lock()
		defer h.proxy.mu.Unlock()
		return h.proxy.creates == 1
	})
	h.proxy.restart(t, h.socket("proxy"), func() {
		h.restartDriver(t)
		h.proxy.mu.Lock()
		h.proxy.hold = nil
		h.proxy.mu.Unlock()
	})
	close(hold)
	c = h.waitContent(t, c.Name, "ready", ready)
	if snaps := h.backendSnapshots(t, vol); len(snaps) != 1 || snaps[0].GetSnapshotId() != *c.Status.SnapshotHandle {
		t.Fatalf("backend snapshots %v, status %+v", snaps, c.Status)
	}
	h.proxy.mu.Lock()
	defer h.proxy.mu.Unlock()
	if h.proxy.creates < 2 {
		t.Errorf("%d CreateSnapshot calls, want a retry after the restart", h.proxy.creates)
	}
}
