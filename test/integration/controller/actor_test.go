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
	go func() {
		for ctx.Err() == nil {
			a.pass(ctx)
			time.Sleep(30 * time.Millisecond)
		}
	}()
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
}

func (a *actor) handle(ctx context.Context, content *snapshotv1.VolumeSnapshotContent) {
	a.mu.Lock()
	hold := a.hold
	a.mu.Unlock()
	_, creating := content.Annotations[protocol.AnnBeingCreated]
	_, deleting := content.Annotations[protocol.AnnBeingDeleted]
	switch {
	case content.DeletionTimestamp != nil && !creating && (deleting || content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentRetain):
		if deleting && content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentDelete && content.Status != nil && content.Status.SnapshotHandle != nil {
			a.mu.Lock()
			a.deleted = append(a.deleted, *content.Status.SnapshotHandle)
			a.mu.Unlock()
		}
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
		SnapshotHandle: &handle, ReadyToUse: ptr(true), RestoreSize: ptr(int64(1 << 30)), CreationTime: &now,
	}
	_, _ = a.client.SnapshotV1().VolumeSnapshotContents().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
}

func (a *actor) patch(ctx context.Context, name string, patch map[string]any) {
	data, _ := json.Marshal(patch)
	_, _ = a.client.SnapshotV1().VolumeSnapshotContents().Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
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
