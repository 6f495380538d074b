package snapshot

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Event reasons on VolumeGroupSnapshots.
const (
	ReasonGroupReady   = "GroupSnapshotReady"
	ReasonGroupInvalid = "InvalidGroupSnapshot"
)

// syncGroupSnapshot is the VolumeGroupSnapshot state machine, the group twin of syncSnapshot:
//
//	deleting                -> finalizeGroup (members first, then the group content)
//	content exists          -> syncBoundGroup (bind, finalizer, members, status)
//	dynamic, no content yet -> provisionGroup (select claims, class, create the content)
func (g *groups) syncGroupSnapshot(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot) error {
	if vgs.DeletionTimestamp != nil {
		return g.finalizeGroup(ctx, vgs)
	}
	content, err := g.contentOf(vgs)
	if err != nil {
		return err
	}
	switch {
	case content != nil:
		return g.syncBoundGroup(ctx, vgs, content)
	case vgs.Spec.Source.Selector == nil || (vgs.Status != nil && vgs.Status.BoundVolumeGroupSnapshotContentName != nil):
		return g.failGroup(ctx, vgs, fmt.Errorf("VolumeGroupSnapshotContent %s does not exist", g.contentNameOf(vgs)))
	default:
		return g.provisionGroup(ctx, vgs)
	}
}

// contentNameOf is the group content vgs is bound to or will be.
func (g *groups) contentNameOf(vgs *groupv1.VolumeGroupSnapshot) string {
	switch {
	case vgs.Status != nil && vgs.Status.BoundVolumeGroupSnapshotContentName != nil:
		return *vgs.Status.BoundVolumeGroupSnapshotContentName
	case vgs.Spec.Source.VolumeGroupSnapshotContentName != nil:
		return *vgs.Spec.Source.VolumeGroupSnapshotContentName
	default:
		return protocol.GroupContentName(vgs.UID)
	}
}

func (g *groups) contentOf(vgs *groupv1.VolumeGroupSnapshot) (*groupv1.VolumeGroupSnapshotContent, error) {
	name := g.contentNameOf(vgs)
	content, err := g.contents.Get(name)
	if apierrors.IsNotFound(err) {
		if own, ok := g.contentWrites.Get(controller.Key{Name: name}); ok {
			return own, nil
		}
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return g.contentWrites.Latest(content), nil
}

// syncBoundGroup checks the binding, binds a pre-provisioned content, keeps the finalizer,
// creates the members once the sidecar reported them, and writes the group's status.
func (g *groups) syncBoundGroup(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) error {
	ref := content.Spec.VolumeGroupSnapshotRef
	if ref.Name != vgs.Name || ref.Namespace != vgs.Namespace || (ref.UID != "" && ref.UID != vgs.UID) {
		return g.failGroup(ctx, vgs, fmt.Errorf("VolumeGroupSnapshotContent %s is bound to VolumeGroupSnapshot %s/%s (uid %q), not to this one",
			content.Name, ref.Namespace, ref.Name, ref.UID))
	}
	var err error
	if content.DeletionTimestamp == nil && (ref.UID == "" || !hasFinalizer(content, protocol.GroupContentBoundFinalizer)) {
		updated := content.DeepCopy()
		updated.Spec.VolumeGroupSnapshotRef.UID = vgs.UID
		updated.Spec.VolumeGroupSnapshotRef.APIVersion = groupv1.SchemeGroupVersion.String()
		updated.Spec.VolumeGroupSnapshotRef.Kind = "VolumeGroupSnapshot"
		updated.Finalizers, _ = withFinalizers(updated.Finalizers, []string{protocol.GroupContentBoundFinalizer}, nil)
		if content, err = patchObject(ctx, g.contentClient.GroupsnapshotV1().VolumeGroupSnapshotContents().Patch, g.contentWrites, content, updated); err != nil {
			return err
		}
		g.contentQueue.Add(controller.KeyOf(content)) // as in bindContent: vgs may be gone already
	}
	if vgs, err = g.ensureGroupFinalizer(ctx, vgs); err != nil {
		return err
	}
	ready, err := g.ensureMembers(ctx, vgs, content)
	if err != nil {
		return err
	}
	return g.writeGroupStatus(ctx, vgs, desiredGroupStatus(content, ready))
}

func (g *groups) ensureGroupFinalizer(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot) (*groupv1.VolumeGroupSnapshot, error) {
	finalizers, changed := withFinalizers(vgs.Finalizers, []string{protocol.GroupSnapshotBoundFinalizer}, nil)
	if !changed {
		return vgs, nil
	}
	updated := vgs.DeepCopy()
	updated.Finalizers = finalizers
	return patchObject(ctx, g.client.GroupsnapshotV1().VolumeGroupSnapshots(vgs.Namespace).Patch, g.snapshotWrites, vgs, updated)
}

// desiredGroupStatus is the group's status as its content and members report it.
func desiredGroupStatus(content *groupv1.VolumeGroupSnapshotContent, membersReady bool) *groupv1.VolumeGroupSnapshotStatus {
	want := &groupv1.VolumeGroupSnapshotStatus{BoundVolumeGroupSnapshotContentName: ptr(content.Name), ReadyToUse: ptr(false)}
	if st := content.Status; st != nil {
		want.ReadyToUse = ptr(st.ReadyToUse != nil && *st.ReadyToUse && membersReady)
		if st.CreationTime != nil {
			want.CreationTime = ptr(metav1.NewTime(st.CreationTime.Time.UTC().Truncate(1e9)))
		}
		if st.Error != nil {
			want.Error = st.Error.DeepCopy()
		}
	}
	return want
}

func (g *groups) writeGroupStatus(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, want *groupv1.VolumeGroupSnapshotStatus) error {
	if vgs.Status != nil && equality.Semantic.DeepEqual(*vgs.Status, *want) {
		return nil
	}
	wasReady := vgs.Status != nil && vgs.Status.ReadyToUse != nil && *vgs.Status.ReadyToUse
	updated := vgs.DeepCopy()
	updated.Status = want
	result, err := g.client.GroupsnapshotV1().VolumeGroupSnapshots(vgs.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	g.snapshotWrites.Record(result)
	if *want.ReadyToUse && !wasReady {
		klog.FromContext(ctx).V(2).Info("Group snapshot ready")
		metrics.Operations.WithLabelValues(metrics.OperationCreateGroup, metrics.StatusSuccess).
			Observe(g.clock.Since(vgs.CreationTimestamp.Time).Seconds())
		if g.opts.ReadyEvents {
			g.recorder.Event(result, corev1.EventTypeNormal, ReasonGroupReady, "Group snapshot is ready to use")
		}
	}
	return nil
}

// failGroup reports bad input on a group snapshot, once per message, and does not retry.
func (g *groups) failGroup(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, cause error) error {
	msg := cause.Error()
	if vgs.Status != nil && vgs.Status.Error != nil && vgs.Status.Error.Message != nil && *vgs.Status.Error.Message == msg {
		return controller.Final(cause)
	}
	want := &groupv1.VolumeGroupSnapshotStatus{ReadyToUse: ptr(false)}
	if vgs.Status != nil {
		want = vgs.Status.DeepCopy()
		want.ReadyToUse = ptr(false)
	}
	now := metav1.NewTime(g.clock.Now())
	want.Error = &snapshotError{Time: &now, Message: &msg}
	updated := vgs.DeepCopy()
	updated.Status = want
	result, err := g.client.GroupsnapshotV1().VolumeGroupSnapshots(vgs.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	g.snapshotWrites.Record(result)
	g.recorder.Event(vgs, corev1.EventTypeWarning, ReasonGroupInvalid, msg)
	metrics.Operations.WithLabelValues(metrics.OperationCreateGroup, metrics.StatusFailure).
		Observe(g.clock.Since(vgs.CreationTimestamp.Time).Seconds())
	return controller.Final(cause)
}
