package stack

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
)

// NewSnapshot is a VolumeSnapshot of claim; an empty class leaves the choice to the default class.
func NewSnapshot(namespace, name, claim, class string) *snapshotv1.VolumeSnapshot {
	vs := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: snapshotv1.VolumeSnapshotSpec{
			Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(claim)},
		},
	}
	if class != "" {
		vs.Spec.VolumeSnapshotClassName = ptr.To(class)
	}
	return vs
}

// Ready tells whether the snapshot reports readyToUse.
func Ready(vs *snapshotv1.VolumeSnapshot) bool {
	return vs.Status != nil && ptr.Deref(vs.Status.ReadyToUse, false)
}

// WaitSnapshot polls the snapshot until cond holds and returns it.
func WaitSnapshot(ctx context.Context, client clientset.Interface, namespace, name string, timeout time.Duration,
	cond func(*snapshotv1.VolumeSnapshot) bool) (*snapshotv1.VolumeSnapshot, error) {
	var last *snapshotv1.VolumeSnapshot
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		vs, err := client.SnapshotV1().VolumeSnapshots(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		last = vs
		return cond(vs), nil
	})
	if err != nil {
		return last, fmt.Errorf("VolumeSnapshot %s/%s: %w (last status %s)", namespace, name, err, describe(last))
	}
	return last, nil
}

func describe(vs *snapshotv1.VolumeSnapshot) string {
	if vs == nil || vs.Status == nil {
		return "none"
	}
	s := fmt.Sprintf("ready=%v content=%s", ptr.Deref(vs.Status.ReadyToUse, false), ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, ""))
	if vs.Status.Error != nil {
		s += " error=" + ptr.Deref(vs.Status.Error.Message, "")
	}
	return s
}

// WaitGone polls get until it answers NotFound.
func WaitGone(ctx context.Context, timeout time.Duration, what string, get func(ctx context.Context) error) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := get(ctx)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return fmt.Errorf("%s still there: %w", what, err)
	}
	return nil
}
