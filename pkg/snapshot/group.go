package snapshot

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
	grouplisters "github.com/shutter-csi/shutter/client/listers/volumegroupsnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Event reasons on VolumeGroupSnapshots.
const (
	ReasonGroupReady   = "GroupSnapshotReady"
	ReasonGroupInvalid = "InvalidGroupSnapshot"
)

// groupReconciler reconciles VolumeGroupSnapshots and VolumeGroupSnapshotContents.
type groupReconciler = reconciler[*groupv1.VolumeGroupSnapshot, *groupv1.VolumeGroupSnapshotContent]

var groupKeys = kindKeys{
	snapshotKind: "VolumeGroupSnapshot", contentKind: "VolumeGroupSnapshotContent", apiVersion: groupv1.SchemeGroupVersion.String(),
	snapshotQueue: "volumegroupsnapshot", contentQueue: "volumegroupsnapshotcontent", defaultContent: protocol.GroupContentName,
	snapshotResource: groupv1.Resource("volumegroupsnapshots"), contentResource: groupv1.Resource("volumegroupsnapshotcontents"),
	contentFinalizer: protocol.GroupContentBoundFinalizer, beingCreated: protocol.AnnGroupBeingCreated, beingDeleted: protocol.AnnGroupBeingDeleted,
	classKind: "VolumeGroupSnapshotClass", secret: protocol.GroupSecret,
	secretName: protocol.AnnGroupDeletionSecretName, secretNamespace: protocol.AnnGroupDeletionSecretNamespace,
	reasonContentMissing: ReasonGroupInvalid, reasonBindingInvalid: ReasonGroupInvalid,
	reasonReady: ReasonGroupReady, readyMessage: "Group snapshot is ready to use",
	opCreate: metrics.OperationCreateGroup, opDelete: metrics.OperationDeleteGroup,
	upstream: groupUpstreamOps,
}

// groups is the group reconciler with what runs it; the controller has one once groups are
// enabled and served.
type groups struct {
	r      *groupReconciler
	synced []cache.InformerSynced
	// stopped is closed when run returns: its workers have finished.
	stopped chan struct{}
}

// groupKind adapts VolumeGroupSnapshot and VolumeGroupSnapshotContent, and adds what only groups
// do: select their volumes, and make and let go of their member snapshots.
type groupKind struct {
	client       clientset.Interface // GETs only
	classes      grouplisters.VolumeGroupSnapshotClassLister
	classIndexer cache.Indexer
	claims       corelisters.PersistentVolumeClaimLister
	volumes      corelisters.PersistentVolumeLister
	members      members
	// distributed (--enable-distributed-snapshotting) labels a group content with the node of
	// its volumes, and refuses a group whose volumes sit on several nodes.
	distributed bool
}

var _ kind[*groupv1.VolumeGroupSnapshot, *groupv1.VolumeGroupSnapshotContent] = (*groupKind)(nil)

// newGroups wires a group reconciler to informers from factory; members are the single
// snapshots' side.
func (c *Controller) newGroups(factory snapinformers.SharedInformerFactory) (*groups, error) {
	vgs := factory.Groupsnapshot().V1().VolumeGroupSnapshots()
	vgsc := factory.Groupsnapshot().V1().VolumeGroupSnapshotContents()
	class := factory.Groupsnapshot().V1().VolumeGroupSnapshotClasses()
	if err := class.Informer().AddIndexers(cache.Indexers{byDriver: groupClassesByDriver}); err != nil {
		return nil, fmt.Errorf("add indexers: %w", err)
	}
	k := &groupKind{client: c.clients.Snapshots, classes: class.Lister(),
		classIndexer: class.Informer().GetIndexer(), claims: c.single.claims, volumes: c.single.volumes,
		distributed: c.opts.DistributedSnapshotting,
		members: members{snapshotLister: c.singles.snapshotLister, snapshotIndexer: c.single.snapshotIndexer,
			volumeIndexer: c.single.volumeIndexer, contentLister: c.singles.contentLister,
			snapshotWriter: c.writes.snapshots, contentWriter: c.writes.contents, wake: c.singles.snapshotQueue.Add}}
	r, synced, err := newReconciler(c, pair[*groupv1.VolumeGroupSnapshot, *groupv1.VolumeGroupSnapshotContent]{
		kind: k, snapshots: c.writes.groups, contents: c.writes.groupContents,
		snapshotInformer: vgs.Informer(), contentInformer: vgsc.Informer(), classInformer: class.Informer(),
		// Groups are few (one per application, not one per volume), so neither urgency nor pacing
		// is worth their cost. A group's status does not wait for the sidecar's first report: its
		// readiness also waits for its members, which are made only after that report, so no
		// grace would bring binding and readiness into one write.
		tuning: tuning{},
	})
	if err != nil {
		return nil, err
	}
	return &groups{r: r, synced: synced, stopped: make(chan struct{})}, nil
}

func groupClassesByDriver(obj any) ([]string, error) {
	if class, ok := obj.(*groupv1.VolumeGroupSnapshotClass); ok {
		return []string{class.Driver}, nil
	}
	return nil, nil
}

// run waits for the group caches and runs the two group queues until ctx is done.
func (g *groups) run(ctx context.Context, workers int, resync time.Duration) {
	defer close(g.stopped)
	if !cache.WaitForCacheSync(ctx.Done(), g.synced...) {
		return
	}
	klog.FromContext(ctx).Info("Group snapshot caches synced; starting workers")
	g.r.run(ctx, workers, resync)
}

func (*groupKind) keys() kindKeys { return groupKeys }

func (k *groupKind) liveSnapshot(ctx context.Context, namespace, name string) (*groupv1.VolumeGroupSnapshot, error) {
	return k.client.GroupsnapshotV1().VolumeGroupSnapshots(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (*groupKind) state(vgs *groupv1.VolumeGroupSnapshot) snapshotState {
	st := vgs.Status
	if st == nil {
		return snapshotState{}
	}
	return snapshotState{reported: true, content: ptr.Deref(st.BoundVolumeGroupSnapshotContentName, ""), ready: protocol.Ready(vgs), err: st.Error,
		created: st.CreationTime != nil}
}

func (*groupKind) status(vgs *groupv1.VolumeGroupSnapshot) any { return vgs.Status }

func (*groupKind) sourceContent(vgs *groupv1.VolumeGroupSnapshot) string {
	return ptr.Deref(vgs.Spec.Source.VolumeGroupSnapshotContentName, "")
}

func (*groupKind) waitsForContent(*groupv1.VolumeGroupSnapshot) bool { return false }

func (*groupKind) withError(vgs *groupv1.VolumeGroupSnapshot, e *snapshotv1.VolumeSnapshotError) *groupv1.VolumeGroupSnapshot {
	updated := vgs.DeepCopy()
	if updated.Status == nil {
		updated.Status = &groupv1.VolumeGroupSnapshotStatus{}
	}
	updated.Status.Error, updated.Status.ReadyToUse = e, ptr.To(false)
	return updated
}

func (*groupKind) withStatus(vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent, membersReady bool) *groupv1.VolumeGroupSnapshot {
	updated := vgs.DeepCopy()
	updated.Status = desiredGroupStatus(content, membersReady)
	return updated
}

// desiredGroupStatus is the group's status as its content and members report it.
func desiredGroupStatus(content *groupv1.VolumeGroupSnapshotContent, membersReady bool) *groupv1.VolumeGroupSnapshotStatus {
	want := &groupv1.VolumeGroupSnapshotStatus{BoundVolumeGroupSnapshotContentName: ptr.To(content.Name), ReadyToUse: ptr.To(false)}
	if st := content.Status; st != nil {
		want.ReadyToUse = ptr.To(protocol.Ready(content) && membersReady)
		if st.CreationTime != nil {
			want.CreationTime = ptr.To(metav1.NewTime(st.CreationTime.Time.UTC().Truncate(1e9)))
		}
		if st.Error != nil {
			want.Error = st.Error.DeepCopy()
		}
	}
	return want
}

// contentFailure: a group content's error shows in the group's status only.
func (*groupKind) contentFailure() (string, bool) { return "", false }

// inputFailureCounts: a group that cannot be taken as asked counts as a failed create.
func (*groupKind) inputFailureCounts() bool { return true }

func (*groupKind) finalizers(snapshotv1.DeletionPolicy) []string {
	return []string{protocol.GroupSnapshotBoundFinalizer}
}

// withClass records the driver's default class in the spec of a group that named none, as
// upstream's controller does (Kubernetes' VolumeGroupSnapshotClass e2e test reads it back).
func (*groupKind) withClass(vgs *groupv1.VolumeGroupSnapshot, class string) (*groupv1.VolumeGroupSnapshot, bool) {
	if vgs.Spec.VolumeGroupSnapshotClassName != nil {
		return vgs, false
	}
	updated := vgs.DeepCopy()
	updated.Spec.VolumeGroupSnapshotClassName = &class
	return updated, true
}

func (k *groupKind) classDriver(vgs *groupv1.VolumeGroupSnapshot) string {
	if vgs.Spec.VolumeGroupSnapshotClassName != nil {
		if class, err := k.classes.Get(*vgs.Spec.VolumeGroupSnapshotClassName); err == nil {
			return class.Driver
		}
	}
	return ""
}

func (*groupKind) ref(c *groupv1.VolumeGroupSnapshotContent) *corev1.ObjectReference {
	return &c.Spec.VolumeGroupSnapshotRef
}

// info: a group content is never a member.
func (*groupKind) info(c *groupv1.VolumeGroupSnapshotContent) contentInfo {
	return contentInfo{policy: c.Spec.DeletionPolicy, driver: c.Spec.Driver, reported: c.Status != nil}
}

// bound creates the members of a dynamic group once the sidecar reported them and tells whether
// all are ready. A pre-provisioned group gets none, as upstream's does: whoever imports it
// imports its members too, as pre-provisioned snapshots owned by the group (Kubernetes' e2e
// suite counts them).
func (k *groupKind) bound(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) (bool, error) {
	if content.Spec.Source.GroupSnapshotHandles != nil {
		return true, nil
	}
	return k.members.ensure(ctx, vgs, content)
}

func (*groupKind) changed(*groupv1.VolumeGroupSnapshot) {}

func (*groupKind) afterBound(context.Context, *groupv1.VolumeGroupSnapshot) error { return nil }

// finalizing lets the members go first, each per its content's policy; the group's own
// finalizer is dropped once none is left.
func (k *groupKind) finalizing(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent, found bool) ([]string, error) {
	if !kube.HasFinalizer(vgs, protocol.GroupSnapshotBoundFinalizer) {
		return nil, nil
	}
	if !found {
		content = nil
	}
	left, err := k.members.release(ctx, vgs, content)
	if err != nil || left {
		// Member deletions wake the group again (snapshotKind.changed).
		return nil, err
	}
	return []string{protocol.GroupSnapshotBoundFinalizer}, nil
}

func (*groupKind) releasing(context.Context, *groupv1.VolumeGroupSnapshot) error { return nil }
