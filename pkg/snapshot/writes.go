package snapshot

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
)

// Every API write of the controller goes through this file: metadata changes as JSON merge
// patches with a resourceVersion precondition, status through the status subresource, and each
// result recorded in the own-write cache.

// patchFunc is the Patch method of a typed client.
type patchFunc[T any] func(ctx context.Context, name string, pt types.PatchType, data []byte,
	opts metav1.PatchOptions, subresources ...string) (T, error)

// patchObject sends the merge patch that turns old into updated, on the condition that old is
// still current, and records the result.
func patchObject[T metav1.Object](ctx context.Context, patch patchFunc[T], writes *controller.Writes[T], old, updated T) (T, error) {
	data, err := kube.MergePatch(old, updated)
	if err != nil || data == nil {
		return old, err
	}
	result, err := patch(ctx, old.GetName(), types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil {
		var zero T
		return zero, fmt.Errorf("patch %s: %w", old.GetName(), err)
	}
	writes.Record(result)
	return result, nil
}

func (c *Controller) patchSnapshot(ctx context.Context, old, updated *snapshotv1.VolumeSnapshot) (*snapshotv1.VolumeSnapshot, error) {
	return patchObject(ctx, c.client.SnapshotV1().VolumeSnapshots(old.Namespace).Patch, c.snapshotWrites, old, updated)
}

func (c *Controller) updateSnapshotStatus(ctx context.Context, vs *snapshotv1.VolumeSnapshot) (*snapshotv1.VolumeSnapshot, error) {
	result, err := c.client.SnapshotV1().VolumeSnapshots(vs.Namespace).UpdateStatus(ctx, vs, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update status: %w", err)
	}
	c.snapshotWrites.Record(result)
	return result, nil
}

func (c *Controller) patchContent(ctx context.Context, old, updated *snapshotv1.VolumeSnapshotContent) (*snapshotv1.VolumeSnapshotContent, error) {
	return patchObject(ctx, c.contentClient.SnapshotV1().VolumeSnapshotContents().Patch, c.contentWrites, old, updated)
}

func (c *Controller) createContent(ctx context.Context, content *snapshotv1.VolumeSnapshotContent) (*snapshotv1.VolumeSnapshotContent, error) {
	result, err := c.contentClient.SnapshotV1().VolumeSnapshotContents().Create(ctx, content, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create content %s: %w", content.Name, err)
	}
	c.contentWrites.Record(result)
	return result, nil
}

func (c *Controller) patchClaim(ctx context.Context, old, updated *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	return patchObject(ctx, c.kube.CoreV1().PersistentVolumeClaims(old.Namespace).Patch, c.claimWrites, old, updated)
}
