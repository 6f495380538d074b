package snapshot

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/listers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
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

// memberContentName is the content a member snapshot of a group made by this controller (or
// upstream's) is bound to: the one named like it; "" for any other snapshot.
func memberContentName(vs *snapshotv1.VolumeSnapshot) string {
	if groupOwner(vs) == nil || vs.Spec.Source.PersistentVolumeClaimName == nil {
		return ""
	}
	name, _ := protocol.MemberContentOf(vs.Name)
	return name
}

// claimOf is the name of the claim in namespace bound to the driver's volume handle, "" when
// none is known (upstream's controller names no claim then either).
func (m members) claimOf(namespace, driver, handle string) string {
	if handle == "" {
		return ""
	}
	for _, pv := range indexed[*corev1.PersistentVolume](m.volumeIndexer, byVolumeHandle, driver+"/"+handle) {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == namespace {
			return ref.Name
		}
	}
	return ""
}

// memberKey identifies a member: its volume handle, or its snapshot handle when the driver did not
// report the volume (a pre-provisioned group).
func memberKey(info groupv1.VolumeSnapshotInfo) string {
	if info.VolumeHandle != "" {
		return info.VolumeHandle
	}
	return info.SnapshotHandle
}

// members are the single-snapshot side as a group sees it: the member snapshots and contents it
// makes and lets go.
type members struct {
	snapshotLister  listers.ResourceIndexer[*snapshotv1.VolumeSnapshot]
	snapshotIndexer cache.Indexer // byGroup
	volumeIndexer   cache.Indexer // byVolumeHandle
	contentLister   listers.ResourceIndexer[*snapshotv1.VolumeSnapshotContent]
	snapshotWriter  *kube.Writer[*snapshotv1.VolumeSnapshot]
	contentWriter   *kube.Writer[*snapshotv1.VolumeSnapshotContent]
	// wake queues a member snapshot, whose sync the controller's own writes do not trigger.
	wake func(controller.Key)
}

// ensure creates the member snapshots and contents the group content reports, and tells
// whether every member is ready.
func (m members) ensure(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) (bool, error) {
	st := content.Status
	if st == nil || st.VolumeGroupSnapshotHandle == nil || len(st.VolumeSnapshotInfoList) == 0 {
		return false, nil
	}
	ready := true
	for _, info := range st.VolumeSnapshotInfoList {
		key := memberKey(info)
		vs, err := m.ensureSnapshot(ctx, vgs, content, info)
		if err != nil {
			return false, err
		}
		if err := m.ensureContent(ctx, vs, protocol.MemberContentName(vgs.UID, key), content, info); err != nil {
			return false, err
		}
		ready = ready && protocol.Ready(vs)
	}
	return ready, nil
}

// ensureSnapshot creates a member's snapshot. As upstream's, it names its volume's claim as its
// source (backup tools and Kubernetes' e2e suite read it there); its owner reference makes it a
// member, which the single-snapshot sync never provisions, and its content is the one named like
// it (protocol.MemberContentOf).
func (m members) ensureSnapshot(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot,
	content *groupv1.VolumeGroupSnapshotContent, info groupv1.VolumeSnapshotInfo) (*snapshotv1.VolumeSnapshot, error) {
	name := protocol.MemberSnapshotName(vgs.UID, memberKey(info))
	if vs, found, err := lookup(m.snapshotLister, m.snapshotWriter, controller.Key{Namespace: vgs.Namespace, Name: name}); err != nil || found {
		return vs, err
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
				Name: vgs.Name, UID: vgs.UID, Controller: ptr.To(true),
			}},
		},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{
			PersistentVolumeClaimName: ptr.To(m.claimOf(vgs.Namespace, content.Spec.Driver, info.VolumeHandle)),
		}},
	}
	created, err := m.snapshotWriter.Create(ctx, vs)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Created member snapshot", "snapshot", name)
	return created, nil
}

// ensureContent creates the pre-provisioned content of a member, bound to its snapshot from the
// start, and writes into its status what the group content reported for it. No sidecar reports
// on a member content, so a content found without its handle in status (the status write failed,
// or this or another replica stopped between the create and that write) gets the status written
// here; otherwise the member would never become ready, nor its group.
func (m members) ensureContent(ctx context.Context, vs *snapshotv1.VolumeSnapshot, name string,
	group *groupv1.VolumeGroupSnapshotContent, info groupv1.VolumeSnapshotInfo) error {
	content, found, err := lookup(m.contentLister, m.contentWriter, controller.Key{Name: name})
	if err != nil {
		return err
	}
	if !found {
		if content, err = m.createContent(ctx, vs, name, group, info); err != nil {
			return err
		}
	}
	if content.DeletionTimestamp != nil || (content.Status != nil && content.Status.SnapshotHandle != nil) {
		return nil
	}
	return m.writeStatus(ctx, vs, content, group, info)
}

func (m members) createContent(ctx context.Context, vs *snapshotv1.VolumeSnapshot, name string,
	group *groupv1.VolumeGroupSnapshotContent, info groupv1.VolumeSnapshotInfo) (*snapshotv1.VolumeSnapshotContent, error) {
	content := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Finalizers: []string{protocol.ContentBoundFinalizer},
			Annotations: map[string]string{protocol.AnnGroupSnapshotHandle: *group.Status.VolumeGroupSnapshotHandle},
		},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{
				APIVersion: snapshotv1.SchemeGroupVersion.String(), Kind: "VolumeSnapshot",
				Namespace: vs.Namespace, Name: vs.Name, UID: vs.UID,
			},
			DeletionPolicy: group.Spec.DeletionPolicy, Driver: group.Spec.Driver,
			Source: snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To(info.SnapshotHandle)},
		},
	}
	if node := group.Labels[protocol.LabelManagedBy]; node != "" {
		// Distributed snapshotting: the group's node's sidecar handles its members' contents.
		content.Labels = map[string]string{protocol.LabelManagedBy: node}
	}
	return m.contentWriter.Create(ctx, content)
}

// writeStatus writes the member's report from the group content into its content's status.
func (m members) writeStatus(ctx context.Context, vs *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent,
	group *groupv1.VolumeGroupSnapshotContent, info groupv1.VolumeSnapshotInfo) error {
	updated := content.DeepCopy()
	updated.Status = &snapshotv1.VolumeSnapshotContentStatus{
		SnapshotHandle: ptr.To(info.SnapshotHandle), CreationTime: info.CreationTime, RestoreSize: info.RestoreSize,
		ReadyToUse:                ptr.To(ptr.Deref(info.ReadyToUse, true)),
		VolumeGroupSnapshotHandle: ptr.To(*group.Status.VolumeGroupSnapshotHandle),
	}
	// A patch: the upstream controller's role grants only patch on volumesnapshotcontents/status.
	if _, err := m.contentWriter.PatchStatus(ctx, content, updated); err != nil {
		return err
	}
	m.wake(controller.KeyOf(vs))
	return nil
}

// release lets the members of a group go: each loses its in-group finalizer and is
// deleted, and the single-snapshot sync then handles its content per the deletion policy.
// It tells whether any member is still there.
//
// A member that was deleted on its own before changes only by this controller's own write here,
// which raises no event: it is queued explicitly, or it would keep its other finalizers and the
// group would wait for it forever.
func (m members) release(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) (bool, error) {
	left := false
	for _, vs := range m.of(vgs, content) {
		left = true
		if kube.HasFinalizer(vs, protocol.SnapshotInGroupFinalizer) {
			updated := vs.DeepCopy()
			updated.Finalizers, _ = kube.WithFinalizers(vs.Finalizers, nil, []string{protocol.SnapshotInGroupFinalizer})
			var err error
			if vs, err = m.snapshotWriter.Patch(ctx, vs, updated); err != nil {
				return true, ignoreNotFound(err)
			}
			m.wake(controller.KeyOf(vs))
		}
		if vs.DeletionTimestamp == nil {
			if err := m.snapshotWriter.Delete(ctx, vs); ignoreNotFound(err) != nil {
				return true, err
			}
		}
	}
	return left, nil
}

// of lists the member snapshots of vgs: those in the informer cache, and those this
// controller created from the group content's report that the cache does not show yet (a
// group deleted right after its members were made must not miss them and leave them behind).
func (m members) of(vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) []*snapshotv1.VolumeSnapshot {
	members := indexed[*snapshotv1.VolumeSnapshot](m.snapshotIndexer, byGroup, string(vgs.UID))
	seen := map[string]bool{}
	for i, vs := range members {
		members[i] = m.snapshotWriter.Cache().Latest(vs)
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
		own, ok := m.snapshotWriter.Cache().Get(key)
		if ok && (own.DeletionTimestamp == nil || len(own.Finalizers) > 0) { // not released already
			members = append(members, own)
		}
	}
	return members
}
