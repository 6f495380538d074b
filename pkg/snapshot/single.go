package snapshot

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	snapshotlisters "github.com/shutter-csi/shutter/client/listers/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Event reasons on VolumeSnapshots.
const (
	ReasonSnapshotReady  = "SnapshotReady"
	ReasonSnapshotFailed = "SnapshotFailed"
	ReasonInvalidClass   = "InvalidSnapshotClass"
	ReasonInvalidSource  = "InvalidSnapshotSource"
	ReasonInvalidSecret  = "InvalidSecretTemplate"
	ReasonContentMissing = "SnapshotContentMissing"
	ReasonBindingInvalid = "SnapshotBindingInvalid"
)

// beingCreatedWait is how often a deletion looks again at a content the sidecar is still creating.
const beingCreatedWait = 5 * time.Second

// singleReconciler reconciles VolumeSnapshots and VolumeSnapshotContents.
type singleReconciler = reconciler[*snapshotv1.VolumeSnapshot, *snapshotv1.VolumeSnapshotContent]

var singleKeys = kindKeys{
	snapshotKind: "VolumeSnapshot", contentKind: "VolumeSnapshotContent", apiVersion: snapshotv1.SchemeGroupVersion.String(),
	snapshotQueue: "volumesnapshot", contentQueue: "volumesnapshotcontent", defaultContent: protocol.ContentName,
	snapshotResource: snapshotv1.Resource("volumesnapshots"), contentResource: snapshotv1.Resource("volumesnapshotcontents"),
	contentFinalizer: protocol.ContentBoundFinalizer, beingCreated: protocol.AnnBeingCreated, beingDeleted: protocol.AnnBeingDeleted,
	classKind: "VolumeSnapshotClass", secret: protocol.SnapshotterSecret,
	secretName: protocol.AnnDeletionSecretName, secretNamespace: protocol.AnnDeletionSecretNamespace,
	reasonContentMissing: ReasonContentMissing, reasonBindingInvalid: ReasonBindingInvalid,
	reasonReady: ReasonSnapshotReady, readyMessage: "Snapshot is ready to use",
	opCreate: metrics.OperationCreate, opDelete: metrics.OperationDelete, upstream: singleUpstreamOps,
}

// snapshotKind adapts VolumeSnapshot and VolumeSnapshotContent, and adds what only single
// snapshots do: protect their source claim while they are taken, and wait for claims being
// restored from them and for the group that holds them.
type snapshotKind struct {
	client          clientset.Interface // GETs only
	snapshots       snapshotlisters.VolumeSnapshotLister
	snapshotIndexer cache.Indexer
	snapshotWrites  *controller.Writes[*snapshotv1.VolumeSnapshot]
	contents        snapshotlisters.VolumeSnapshotContentLister
	classes         snapshotlisters.VolumeSnapshotClassLister
	classIndexer    cache.Indexer
	claims          corelisters.PersistentVolumeClaimLister
	claimIndexer    cache.Indexer
	claimWriter     *kube.Writer[*corev1.PersistentVolumeClaim]
	volumes         corelisters.PersistentVolumeLister
	volumeIndexer   cache.Indexer // byVolumeHandle

	preventVolumeModeConversion, distributedSnapshotting bool
	// groups is the group reconciler once groups are enabled.
	groups *atomic.Pointer[groups]
}

var _ kind[*snapshotv1.VolumeSnapshot, *snapshotv1.VolumeSnapshotContent] = (*snapshotKind)(nil)

func (*snapshotKind) keys() kindKeys { return singleKeys }

func (k *snapshotKind) liveSnapshot(ctx context.Context, namespace, name string) (*snapshotv1.VolumeSnapshot, error) {
	return k.client.SnapshotV1().VolumeSnapshots(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (*snapshotKind) state(vs *snapshotv1.VolumeSnapshot) snapshotState {
	st := vs.Status
	if st == nil {
		return snapshotState{}
	}
	return snapshotState{reported: true, content: ptr.Deref(st.BoundVolumeSnapshotContentName, ""), ready: protocol.Ready(vs), err: st.Error,
		created: st.CreationTime != nil}
}

func (*snapshotKind) status(vs *snapshotv1.VolumeSnapshot) any { return vs.Status }

// sourceContent: the content a pre-provisioned snapshot names, or a group's member's own.
func (*snapshotKind) sourceContent(vs *snapshotv1.VolumeSnapshot) string {
	if name := ptr.Deref(vs.Spec.Source.VolumeSnapshotContentName, ""); name != "" {
		return name
	}
	return memberContentName(vs)
}

// waitsForContent: a new group member's content is created by its group.
func (k *snapshotKind) waitsForContent(vs *snapshotv1.VolumeSnapshot) bool {
	return groupOf(vs) != "" && k.state(vs).content == ""
}

func (*snapshotKind) withError(vs *snapshotv1.VolumeSnapshot, e *snapshotv1.VolumeSnapshotError) *snapshotv1.VolumeSnapshot {
	updated := vs.DeepCopy()
	if updated.Status == nil {
		updated.Status = &snapshotv1.VolumeSnapshotStatus{}
	}
	updated.Status.Error, updated.Status.ReadyToUse = e, ptr.To(false)
	return updated
}

func (*snapshotKind) withStatus(vs *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent, _ bool) *snapshotv1.VolumeSnapshot {
	updated := vs.DeepCopy()
	updated.Status = desiredStatus(vs, content)
	return updated
}

// desiredStatus is vs's status as its bound content reports it.
func desiredStatus(vs *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent) *snapshotv1.VolumeSnapshotStatus {
	want := &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(content.Name)}
	if vs.Status != nil {
		want.VolumeGroupSnapshotName = vs.Status.VolumeGroupSnapshotName
	}
	if group := groupOf(vs); group != "" {
		want.VolumeGroupSnapshotName = &group
	}
	st := content.Status
	if st == nil {
		want.ReadyToUse = ptr.To(false)
		return want
	}
	want.ReadyToUse = ptr.To(protocol.Ready(content))
	if st.CreationTime != nil {
		want.CreationTime = ptr.To(metav1.NewTime(time.Unix(0, *st.CreationTime).UTC().Truncate(time.Second)))
	}
	if st.RestoreSize != nil {
		want.RestoreSize = resource.NewQuantity(*st.RestoreSize, resource.BinarySI)
	}
	if st.Error != nil {
		want.Error = st.Error.DeepCopy()
	}
	return want
}

// contentFailure: a content's error is a SnapshotFailed Warning on its snapshot, and a failed
// create.
func (*snapshotKind) contentFailure() (string, bool) { return ReasonSnapshotFailed, true }

// inputFailureCounts: bad input is not counted as a failed create; only the backend's errors are.
func (*snapshotKind) inputFailureCounts() bool { return false }

// finalizers: the as-source finalizer, and the bound one for a Delete policy.
func (*snapshotKind) finalizers(policy snapshotv1.DeletionPolicy) []string {
	if policy == snapshotv1.VolumeSnapshotContentDelete {
		return []string{protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer}
	}
	return []string{protocol.SnapshotAsSourceFinalizer}
}

func (*snapshotKind) withClass(vs *snapshotv1.VolumeSnapshot, class string) (*snapshotv1.VolumeSnapshot, bool) {
	if vs.Spec.VolumeSnapshotClassName != nil {
		return vs, false
	}
	updated := vs.DeepCopy()
	updated.Spec.VolumeSnapshotClassName = &class
	return updated, true
}

func (k *snapshotKind) classDriver(vs *snapshotv1.VolumeSnapshot) string {
	if vs.Spec.VolumeSnapshotClassName != nil {
		if class, err := k.classes.Get(*vs.Spec.VolumeSnapshotClassName); err == nil {
			return class.Driver
		}
	}
	return ""
}

func (*snapshotKind) ref(c *snapshotv1.VolumeSnapshotContent) *corev1.ObjectReference {
	return &c.Spec.VolumeSnapshotRef
}

func (*snapshotKind) info(c *snapshotv1.VolumeSnapshotContent) contentInfo {
	return contentInfo{policy: c.Spec.DeletionPolicy, driver: c.Spec.Driver, reported: c.Status != nil,
		member: c.Annotations[protocol.AnnGroupSnapshotHandle] != ""}
}

func (*snapshotKind) bound(context.Context, *snapshotv1.VolumeSnapshot, *snapshotv1.VolumeSnapshotContent) (bool, error) {
	return true, nil
}

// changed wakes the group of a member: its readiness follows its members', and the
// controller's own writes raise no event.
func (k *snapshotKind) changed(vs *snapshotv1.VolumeSnapshot) {
	if g := k.groups.Load(); g != nil {
		if name := groupOf(vs); name != "" {
			g.r.snapshotQueue.Add(controller.Key{Namespace: vs.Namespace, Name: name})
		}
	}
}

// afterBound releases the source claim once the snapshot is no longer being taken, and sends
// the claims restored from it to its node (distributed snapshotting).
func (k *snapshotKind) afterBound(ctx context.Context, vs *snapshotv1.VolumeSnapshot) error {
	if err := k.releaseClaim(ctx, vs); err != nil {
		return err
	}
	return k.steerRestores(ctx, vs)
}

// releasing lets the source claim go when the snapshot's finalizers are about to be dropped.
func (k *snapshotKind) releasing(ctx context.Context, vs *snapshotv1.VolumeSnapshot) error {
	return k.releaseClaim(ctx, vs)
}

// finalizing keeps a snapshot that its group still holds or that a claim is being restored from;
// a member whose group is gone lets itself go.
func (k *snapshotKind) finalizing(ctx context.Context, vs *snapshotv1.VolumeSnapshot, _ *snapshotv1.VolumeSnapshotContent, _ bool) ([]string, error) {
	ours := []string{protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer}
	if kube.HasFinalizer(vs, protocol.SnapshotInGroupFinalizer) {
		held, err := k.heldByGroup(ctx, vs)
		if err != nil {
			return nil, err
		}
		if held {
			klog.FromContext(ctx).V(4).Info("Keeping snapshot: its group holds it")
			return nil, nil // the group lets it go when the group itself is deleted
		}
		klog.FromContext(ctx).V(2).Info("Releasing a member whose group is gone")
		ours = append(ours, protocol.SnapshotInGroupFinalizer)
	}
	if !slices.ContainsFunc(ours, func(f string) bool { return kube.HasFinalizer(vs, f) }) {
		return nil, k.releaseClaim(ctx, vs)
	}
	if k.restoring(vs) {
		klog.FromContext(ctx).V(4).Info("Keeping snapshot: a claim is being restored from it")
		return nil, nil // the claim's changes bring the snapshot back
	}
	return ours, nil
}

// heldByGroup tells whether a member snapshot's group still exists to let it go. A member whose
// group is gone (deleted before it saw the member, or its finalizer removed by hand) lets
// itself go, so that it never waits for a group that cannot come back.
func (k *snapshotKind) heldByGroup(ctx context.Context, vs *snapshotv1.VolumeSnapshot) (bool, error) {
	g := k.groups.Load()
	owner := groupOwner(vs)
	if g == nil || owner == nil {
		return g == nil, nil
	}
	gone, err := g.r.gone(ctx, vs.Namespace, owner.Name, owner.UID)
	return !gone, err
}

// restoring tells whether a claim is still being provisioned from vs.
func (k *snapshotKind) restoring(vs *snapshotv1.VolumeSnapshot) bool {
	for _, pvc := range indexed[*corev1.PersistentVolumeClaim](k.claimIndexer, byRestoreSource, nsName(vs.Namespace, vs.Name)) {
		if pvc.Status.Phase == corev1.ClaimPending && pvc.DeletionTimestamp == nil {
			return true
		}
	}
	return false
}
