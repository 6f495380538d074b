package controller

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// actor plays the sidecar of one driver: it creates backend snapshots of new dynamic contents
// (being-created annotation, status, annotation removed: three writes, as the protocol has it),
// reports pre-provisioned ones ready, and on deletion removes the content finalizer.
type actor struct {
	client clientset.Interface
	driver string
	// hold keeps new dynamic contents in the being-created state until released.
	mu      sync.Mutex
	hold    bool
	deleted []string // backend snapshots deleted
}

func startActor(t *testing.T, client clientset.Interface, driver string) *actor {
	a := &actor{client: client, driver: driver}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go wait.UntilWithContext(ctx, a.pass, 30*time.Millisecond) // a sidecar's resync, fast, until the test ends
	return a
}

func (a *actor) setHold(hold bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hold = hold
}

func (a *actor) deletedHandles() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.deleted)
}

func (a *actor) pass(ctx context.Context) {
	list, err := a.client.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		content := &list.Items[i]
		if content.Spec.Driver == a.driver {
			a.handle(ctx, content)
		}
	}
	groups, err := a.client.GroupsnapshotV1().VolumeGroupSnapshotContents().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range groups.Items {
		if groups.Items[i].Spec.Driver == a.driver {
			a.handleGroup(ctx, &groups.Items[i])
		}
	}
}

// handleGroup plays the sidecar for a group content: one backend group snapshot with a member per
// volume, and its deletion.
func (a *actor) handleGroup(ctx context.Context, content *groupv1.VolumeGroupSnapshotContent) {
	_, creating := content.Annotations[protocol.AnnGroupBeingCreated]
	_, deleting := content.Annotations[protocol.AnnGroupBeingDeleted]
	patch := func(p map[string]any) {
		data, _ := json.Marshal(p)
		_, _ = a.client.GroupsnapshotV1().VolumeGroupSnapshotContents().Patch(ctx, content.Name, types.MergePatchType, data, metav1.PatchOptions{})
	}
	switch {
	case !slices.Contains(content.Finalizers, protocol.GroupContentBoundFinalizer) && content.DeletionTimestamp != nil:
		// Not this sidecar's to release: as the protocol has it, no backend deletion either.
	case content.DeletionTimestamp != nil && !creating && (deleting || content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentRetain):
		if handle := groupDeletable(content); deleting && content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentDelete && handle != "" {
			a.mu.Lock()
			a.deleted = append(a.deleted, handle)
			a.mu.Unlock()
		}
		patch(map[string]any{"metadata": map[string]any{"finalizers": without(content.Finalizers, protocol.GroupContentBoundFinalizer)}})
	case content.DeletionTimestamp != nil || content.Status != nil:
	case content.Spec.Source.GroupSnapshotHandles != nil:
		handles := content.Spec.Source.GroupSnapshotHandles
		updated := content.DeepCopy()
		updated.Status = &groupv1.VolumeGroupSnapshotContentStatus{
			VolumeGroupSnapshotHandle: &handles.VolumeGroupSnapshotHandle, ReadyToUse: ptr.To(true),
		}
		for _, h := range handles.VolumeSnapshotHandles {
			updated.Status.VolumeSnapshotInfoList = append(updated.Status.VolumeSnapshotInfoList,
				groupv1.VolumeSnapshotInfo{SnapshotHandle: h, ReadyToUse: ptr.To(true)})
		}
		_, _ = a.client.GroupsnapshotV1().VolumeGroupSnapshotContents().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	case !creating:
		patch(map[string]any{"metadata": map[string]any{"annotations": map[string]any{protocol.AnnGroupBeingCreated: "yes"}}})
	default:
		if reportGroup(ctx, a.client, content) == nil {
			patch(map[string]any{"metadata": map[string]any{"annotations": map[string]any{protocol.AnnGroupBeingCreated: nil}}})
		}
	}
}

func (a *actor) handle(ctx context.Context, content *snapshotv1.VolumeSnapshotContent) {
	a.mu.Lock()
	hold := a.hold
	a.mu.Unlock()
	_, creating := content.Annotations[protocol.AnnBeingCreated]
	_, deleting := content.Annotations[protocol.AnnBeingDeleted]
	switch {
	case !slices.Contains(content.Finalizers, protocol.ContentBoundFinalizer) && content.DeletionTimestamp != nil:
		// Not this sidecar's to release: as the protocol has it, no backend deletion either.
	case content.DeletionTimestamp != nil && !creating && (deleting || content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentRetain):
		member := content.Annotations[protocol.AnnGroupSnapshotHandle] != ""
		if handle := deletable(content); !member && deleting && content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentDelete && handle != "" {
			a.mu.Lock()
			a.deleted = append(a.deleted, handle)
			a.mu.Unlock()
		}
		a.patch(ctx, content.Name, map[string]any{"metadata": map[string]any{"finalizers": without(content.Finalizers, protocol.ContentBoundFinalizer)}})
	case content.Annotations[protocol.AnnGroupSnapshotHandle] != "" && content.DeletionTimestamp != nil:
		a.patch(ctx, content.Name, map[string]any{"metadata": map[string]any{"finalizers": without(content.Finalizers, protocol.ContentBoundFinalizer)}})
	case content.DeletionTimestamp != nil || content.Status != nil:
	case content.Spec.Source.VolumeHandle != nil && !creating:
		a.patch(ctx, content.Name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{protocol.AnnBeingCreated: "yes"}}})
	case content.Spec.Source.VolumeHandle != nil && !hold:
		a.ready(ctx, content, "backend-"+string(content.Spec.VolumeSnapshotRef.UID))
		a.patch(ctx, content.Name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{protocol.AnnBeingCreated: nil}}})
	case content.Spec.Source.SnapshotHandle != nil:
		a.ready(ctx, content, *content.Spec.Source.SnapshotHandle)
	}
}

func (a *actor) ready(ctx context.Context, content *snapshotv1.VolumeSnapshotContent, handle string) {
	updated := content.DeepCopy()
	now := time.Now().UnixNano()
	updated.Status = &snapshotv1.VolumeSnapshotContentStatus{
		SnapshotHandle: &handle, ReadyToUse: ptr.To(true), RestoreSize: ptr.To(int64(1 << 30)), CreationTime: &now,
	}
	_, _ = a.client.SnapshotV1().VolumeSnapshotContents().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
}

func (a *actor) patch(ctx context.Context, name string, patch map[string]any) {
	data, _ := json.Marshal(patch)
	_, _ = a.client.SnapshotV1().VolumeSnapshotContents().Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
}

// deletable is the backend snapshot a sidecar deletes: the one in status, else the one a
// pre-provisioned content names.
func deletable(content *snapshotv1.VolumeSnapshotContent) string {
	if content.Status != nil && content.Status.SnapshotHandle != nil {
		return *content.Status.SnapshotHandle
	}
	if content.Spec.Source.SnapshotHandle != nil {
		return *content.Spec.Source.SnapshotHandle
	}
	return ""
}

func groupDeletable(content *groupv1.VolumeGroupSnapshotContent) string {
	if content.Status != nil && content.Status.VolumeGroupSnapshotHandle != nil {
		return *content.Status.VolumeGroupSnapshotHandle
	}
	if h := content.Spec.Source.GroupSnapshotHandles; h != nil {
		return h.VolumeGroupSnapshotHandle
	}
	return ""
}

func without(list []string, drop string) []string {
	out := []string{}
	for _, s := range list {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}
