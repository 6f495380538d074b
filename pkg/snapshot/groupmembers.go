package snapshot

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Members of a group snapshot are ordinary VolumeSnapshots bound to pre-provisioned contents:
// snapshot-<hash> and snapcontent-<hash>, hash = sha256(group uid + volume handle). The snapshot
// is owned by its group and carries the in-group finalizer; the content carries the group handle
// annotation, so no sidecar ever calls CreateSnapshot or DeleteSnapshot for it. From there the
// single-snapshot sync binds them and mirrors the status, as for any pre-provisioned snapshot.

// groupOf is the name of the VolumeGroupSnapshot a member snapshot belongs to, or "".
func groupOf(vs *snapshotv1.VolumeSnapshot) string {
	if ref := groupOwner(vs); ref != nil {
		return ref.Name
	}
	return ""
}

// groupOwner is the owner reference of a member snapshot to its VolumeGroupSnapshot, or nil.
func groupOwner(vs *snapshotv1.VolumeSnapshot) *metav1.OwnerReference {
	for i, ref := range vs.OwnerReferences {
		if ref.Kind == "VolumeGroupSnapshot" && ref.APIVersion == groupv1.SchemeGroupVersion.String() {
			return &vs.OwnerReferences[i]
		}
	}
	return nil
}

// memberKey identifies a member: its volume handle, or its snapshot handle when the driver did not
// report the volume (a pre-provisioned group).
func memberKey(info groupv1.VolumeSnapshotInfo) string {
	if info.VolumeHandle != "" {
		return info.VolumeHandle
	}
	return info.SnapshotHandle
}

// ensureMembers creates the member snapshots and contents the group content reports, and tells
// whether every member is ready.
func (g *groups) ensureMembers(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) (bool, error) {
	st := content.Status
	if st == nil || st.VolumeGroupSnapshotHandle == nil || len(st.VolumeSnapshotInfoList) == 0 {
		return false, nil
	}
	ready := true
	for _, info := range st.VolumeSnapshotInfoList {
		key := memberKey(info)
		vs, err := g.ensureMemberSnapshot(ctx, vgs, content, key)
		if err != nil {
			return false, err
		}
		if err := g.ensureMemberContent(ctx, vs, content, info); err != nil {
			return false, err
		}
		ready = ready && isReady(vs)
	}
	return ready, nil
}

func (g *groups) ensureMemberSnapshot(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot,
	content *groupv1.VolumeGroupSnapshotContent, key string) (*snapshotv1.VolumeSnapshot, error) {
	name := protocol.MemberSnapshotName(vgs.UID, key)
	if vs, err := g.Controller.snapshots.VolumeSnapshots(vgs.Namespace).Get(name); err == nil {
		return g.Controller.snapshotWrites.Latest(vs), nil
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if own, ok := g.Controller.snapshotWrites.Get(controller.Key{Namespace: vgs.Namespace, Name: name}); ok {
		return own, nil
	}
	finalizers := []string{protocol.SnapshotInGroupFinalizer, protocol.SnapshotAsSourceFinalizer}
	if content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentDelete {
		finalizers = append(finalizers, protocol.SnapshotBoundFinalizer)
	}
	vs := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: vgs.Namespace, Finalizers: finalizers,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot",
				Name: vgs.Name, UID: vgs.UID, Controller: ptr(true),
			}},
		},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{
			VolumeSnapshotContentName: ptr(protocol.MemberContentName(vgs.UID, key)),
		}},
	}
	created, err := g.client.SnapshotV1().VolumeSnapshots(vgs.Namespace).Create(ctx, vs, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create member snapshot %s: %w", name, err)
	}
	g.Controller.snapshotWrites.Record(created)
	klog.FromContext(ctx).V(2).Info("Created member snapshot", "snapshot", name)
	return created, nil
}

// ensureMemberContent creates the pre-provisioned content of a member, bound to its snapshot
// from the start, and writes into its status what the group content reported for it. No sidecar
// reports on a member content, so a content found without its handle in status (the status
// write failed, or this or another replica stopped between the create and that write) gets the
// status written here; otherwise the member would never become ready, nor its group.
func (g *groups) ensureMemberContent(ctx context.Context, vs *snapshotv1.VolumeSnapshot,
	group *groupv1.VolumeGroupSnapshotContent, info groupv1.VolumeSnapshotInfo) error {
	name := *vs.Spec.Source.VolumeSnapshotContentName
	content, err := g.Controller.contents.Get(name)
	switch {
	case err == nil:
		content = g.Controller.contentWrites.Latest(content)
	case !apierrors.IsNotFound(err):
		return err
	default:
		content, _ = g.Controller.contentWrites.Get(controller.Key{Name: name})
	}
	if content == nil {
		if content, err = g.createMemberContent(ctx, vs, group, info); err != nil {
			return err
		}
	}
	if content.DeletionTimestamp != nil || (content.Status != nil && content.Status.SnapshotHandle != nil) {
		return nil
	}
	return g.writeMemberStatus(ctx, vs, content, group, info)
}

func (g *groups) createMemberContent(ctx context.Context, vs *snapshotv1.VolumeSnapshot,
	group *groupv1.VolumeGroupSnapshotContent, info groupv1.VolumeSnapshotInfo) (*snapshotv1.VolumeSnapshotContent, error) {
	content := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{
			Name: *vs.Spec.Source.VolumeSnapshotContentName, Finalizers: []string{protocol.ContentBoundFinalizer},
			Annotations: map[string]string{protocol.AnnGroupSnapshotHandle: *group.Status.VolumeGroupSnapshotHandle},
		},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{
				APIVersion: snapshotv1.SchemeGroupVersion.String(), Kind: "VolumeSnapshot",
				Namespace: vs.Namespace, Name: vs.Name, UID: vs.UID,
			},
			DeletionPolicy: group.Spec.DeletionPolicy, Driver: group.Spec.Driver,
			Source: snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr(info.SnapshotHandle)},
		},
	}
	return g.createContent(ctx, content)
}

// writeMemberStatus writes the member's report from the group content into its content's status.
func (g *groups) writeMemberStatus(ctx context.Context, vs *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent,
	group *groupv1.VolumeGroupSnapshotContent, info groupv1.VolumeSnapshotInfo) error {
	updated := content.DeepCopy()
	updated.Status = &snapshotv1.VolumeSnapshotContentStatus{
		SnapshotHandle: ptr(info.SnapshotHandle), CreationTime: info.CreationTime, RestoreSize: info.RestoreSize,
		ReadyToUse:                ptr(info.ReadyToUse == nil || *info.ReadyToUse),
		VolumeGroupSnapshotHandle: ptr(*group.Status.VolumeGroupSnapshotHandle),
	}
	result, err := g.contentClient.SnapshotV1().VolumeSnapshotContents().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("member content %s status: %w", content.Name, err)
	}
	g.Controller.contentWrites.Record(result)
	// Our own status write raises no event for the member's sync; wake it here.
	g.Controller.snapshotQueue.Add(controller.KeyOf(vs))
	return nil
}

// releaseMembers lets the members of a group go: each loses its in-group finalizer and is
// deleted, and the single-snapshot sync then handles its content per the deletion policy.
// It tells whether any member is still there.
//
// A member that was deleted on its own before changes only by this controller's own write here,
// which raises no event: it is queued explicitly, or it would keep its other finalizers and the
// group would wait for it forever.
func (g *groups) releaseMembers(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) (bool, error) {
	left := false
	for _, vs := range g.membersOf(vgs, content) {
		left = true
		if hasFinalizer(vs, protocol.SnapshotInGroupFinalizer) {
			updated := vs.DeepCopy()
			updated.Finalizers, _ = withFinalizers(vs.Finalizers, nil, []string{protocol.SnapshotInGroupFinalizer})
			var err error
			if vs, err = g.patchSnapshot(ctx, vs, updated); err != nil {
				return true, ignoreNotFound(err)
			}
			g.Controller.snapshotQueue.Add(controller.KeyOf(vs))
		}
		if vs.DeletionTimestamp == nil {
			uid := vs.UID
			err := g.client.SnapshotV1().VolumeSnapshots(vs.Namespace).Delete(ctx, vs.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if ignoreNotFound(err) != nil {
				return true, fmt.Errorf("delete member %s: %w", vs.Name, err)
			}
		}
	}
	return left, nil
}

// membersOf lists the member snapshots of vgs: those in the informer cache, and those this
// controller created from the group content's report that the cache does not show yet (a
// group deleted right after its members were made must not miss them and leave them behind).
func (g *groups) membersOf(vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) []*snapshotv1.VolumeSnapshot {
	members := indexed[*snapshotv1.VolumeSnapshot](g.snapshotIndexer, byGroup, string(vgs.UID))
	seen := map[string]bool{}
	for i, vs := range members {
		members[i] = g.Controller.snapshotWrites.Latest(vs)
		seen[vs.Name] = true
	}
	if content == nil || content.Status == nil {
		return members
	}
	for _, info := range content.Status.VolumeSnapshotInfoList {
		key := controller.Key{Namespace: vgs.Namespace, Name: protocol.MemberSnapshotName(vgs.UID, memberKey(info))}
		if seen[key.Name] {
			continue
		}
		own, ok := g.Controller.snapshotWrites.Get(key)
		if ok && (own.DeletionTimestamp == nil || len(own.Finalizers) > 0) { // not released already
			members = append(members, own)
		}
	}
	return members
}

// heldByGroup tells whether a member snapshot's group still exists to let it go. A member whose
// group is gone (deleted before it saw the member, or its finalizer removed by hand) lets
// itself go, so that it never waits for a group that cannot come back.
func (c *Controller) heldByGroup(ctx context.Context, vs *snapshotv1.VolumeSnapshot) (bool, error) {
	g := c.groups.Load()
	owner := groupOwner(vs)
	if g == nil || owner == nil {
		return g == nil, nil
	}
	gone, err := refGone(ctx, owner.UID, func() (metav1.Object, error) {
		return g.snapshots.VolumeGroupSnapshots(vs.Namespace).Get(owner.Name)
	}, func(ctx context.Context) (metav1.Object, error) {
		return c.client.GroupsnapshotV1().VolumeGroupSnapshots(vs.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	})
	return !gone, err
}
