package controller

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/test/testenv"
)

// orphanContent is a content, single or group, whose (group) snapshot ref names a uid that no
// object has: what a backup restore or a GitOps re-apply of an old content looks like. It is
// created without any finalizer.
type orphanContent struct {
	queue  string // the controller's queue of the kind
	create func(t *testing.T, f *fixture, name, handle string, policy snapshotv1.DeletionPolicy)
	get    func(f *fixture, name string) (metav1.Object, error)
	policy func(t *testing.T, f *fixture, name string, policy snapshotv1.DeletionPolicy)
}

// contentClient is what the test uses of the typed client of a content kind.
type contentClient[T metav1.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// orphanKind is the orphanContent of the kind that client serves; orphan builds its objects.
func orphanKind[T metav1.Object](queue string, client func(*fixture) contentClient[T],
	orphan func(f *fixture, name, handle string, policy snapshotv1.DeletionPolicy) T) orphanContent {
	return orphanContent{
		queue: queue,
		create: func(t *testing.T, f *fixture, name, handle string, policy snapshotv1.DeletionPolicy) {
			testenv.Create(t, client(f), orphan(f, name, handle, policy))
		},
		get: func(f *fixture, name string) (metav1.Object, error) {
			return client(f).Get(context.Background(), name, metav1.GetOptions{})
		},
		policy: func(t *testing.T, f *fixture, name string, policy snapshotv1.DeletionPolicy) {
			patch := []byte(`{"spec":{"deletionPolicy":"` + string(policy) + `"}}`)
			if _, err := client(f).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		},
	}
}

var orphanKinds = map[string]orphanContent{
	"content": orphanKind(contentQueue,
		func(f *fixture) contentClient[*snapshotv1.VolumeSnapshotContent] {
			return f.client.SnapshotV1().VolumeSnapshotContents()
		},
		func(f *fixture, name, handle string, policy snapshotv1.DeletionPolicy) *snapshotv1.VolumeSnapshotContent {
			return &snapshotv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: snapshotv1.VolumeSnapshotContentSpec{
				DeletionPolicy: policy, Driver: "orphan.csi.test",
				Source:            snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: &handle},
				VolumeSnapshotRef: corev1.ObjectReference{Namespace: f.ns, Name: "vs-ghost", UID: uuid.NewUUID()},
			}}
		}),
	"group content": orphanKind(groupContentQueue,
		func(f *fixture) contentClient[*groupv1.VolumeGroupSnapshotContent] {
			return f.client.GroupsnapshotV1().VolumeGroupSnapshotContents()
		},
		func(f *fixture, name, handle string, policy snapshotv1.DeletionPolicy) *groupv1.VolumeGroupSnapshotContent {
			return &groupv1.VolumeGroupSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: groupv1.VolumeGroupSnapshotContentSpec{
				DeletionPolicy: policy, Driver: "orphan.csi.test",
				Source: groupv1.VolumeGroupSnapshotContentSource{GroupSnapshotHandles: &groupv1.GroupSnapshotHandles{
					VolumeGroupSnapshotHandle: handle, VolumeSnapshotHandles: []string{handle + "-1"},
				}},
				VolumeGroupSnapshotRef: corev1.ObjectReference{Namespace: f.ns, Name: "vgs-ghost", UID: uuid.NewUUID()},
			}}
		}),
}

// TestOrphanContentBackendDeleted creates contents whose snapshot never existed and that carry no
// finalizer. One with a Delete policy must not leave the API before the sidecar has deleted its
// backend snapshot, whichever way its policy became Delete; one with Retain keeps it.
func TestOrphanContentBackendDeleted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := startActor(t, f.client, "orphan.csi.test")
	for kindName, kind := range orphanKinds {
		for _, tc := range []struct {
			name   string
			policy snapshotv1.DeletionPolicy // at creation; Retain is then patched to Delete
		}{
			{name: "created with Delete", policy: snapshotv1.VolumeSnapshotContentDelete},
			{name: "Retain patched to Delete", policy: snapshotv1.VolumeSnapshotContentRetain},
		} {
			t.Run(kindName+"/"+tc.name, func(t *testing.T) {
				name := "orphan-" + string(uuid.NewUUID())
				handle := "backend-" + name
				looked := processed.After(t, kind.queue, controller.Key{Name: name})
				kind.create(t, f, name, handle, tc.policy)
				if tc.policy == snapshotv1.VolumeSnapshotContentRetain {
					looked.Until(t, "the Retain content was looked at", func(controller.Result) bool { return true })
					if _, err := kind.get(f, name); err != nil {
						t.Fatalf("a Retain content went: %v", err)
					}
					if slices.Contains(a.deletedHandles(), handle) {
						t.Fatal("the backend snapshot of a Retain content was deleted")
					}
					kind.policy(t, f, name, snapshotv1.VolumeSnapshotContentDelete)
				}
				looked.Until(t, "the content is gone", func(controller.Result) bool {
					_, err := kind.get(f, name)
					return apierrors.IsNotFound(err)
				})
				if !slices.Contains(a.deletedHandles(), handle) {
					t.Errorf("content %s went without its backend snapshot %s being deleted (deleted: %v)", name, handle, a.deletedHandles())
				}
			})
		}
	}
}
