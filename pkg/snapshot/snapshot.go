package snapshot

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
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

// syncSnapshot is the VolumeSnapshot state machine:
//
//	deleting                  -> finalizeSnapshot
//	bound or content exists   -> syncBound (bind, finalizers, mirror status, release the claim)
//	dynamic, no content yet   -> provision (checks, finalizers, create the content)
//	pre-provisioned           -> syncBound with the named content
func (c *Controller) syncSnapshot(ctx context.Context, vs *snapshotv1.VolumeSnapshot) error {
	if vs.DeletionTimestamp != nil {
		return c.finalizeSnapshot(ctx, vs)
	}
	content, err := c.contentOf(vs)
	if err != nil {
		return err
	}
	switch {
	case content != nil:
		return c.syncBound(ctx, vs, content)
	case groupOf(vs) != "" && (vs.Status == nil || vs.Status.BoundVolumeSnapshotContentName == nil):
		return nil // a new group member: its group creates the content next
	case boundContentName(vs) != "":
		return c.fail(ctx, vs, ReasonContentMissing, fmt.Errorf("VolumeSnapshotContent %s does not exist", boundContentName(vs)))
	default:
		return c.provision(ctx, vs)
	}
}

// contentOf returns the content vs is bound to or will be: the one its status or source names,
// or for a dynamic snapshot snapcontent-<uid>. It returns nil when that content does not exist.
func (c *Controller) contentOf(vs *snapshotv1.VolumeSnapshot) (*snapshotv1.VolumeSnapshotContent, error) {
	name := boundContentName(vs)
	if name == "" {
		name = protocol.ContentName(vs.UID)
	}
	content, err := c.contents.Get(name)
	if apierrors.IsNotFound(err) {
		if own, ok := c.contentWrites.Get(controller.Key{Name: name}); ok {
			return own, nil // created by this controller; the informer has not seen it yet
		}
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return c.contentWrites.Latest(content), nil
}

// syncBound checks that vs and content point at each other, binds a pre-provisioned content,
// keeps the finalizers, mirrors the content's status and releases the source claim once ready.
func (c *Controller) syncBound(ctx context.Context, vs *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent) error {
	ref := content.Spec.VolumeSnapshotRef
	if ref.Name != vs.Name || ref.Namespace != vs.Namespace || (ref.UID != "" && ref.UID != vs.UID) {
		return c.fail(ctx, vs, ReasonBindingInvalid, fmt.Errorf("VolumeSnapshotContent %s is bound to VolumeSnapshot %s/%s (uid %q), not to this one",
			content.Name, ref.Namespace, ref.Name, ref.UID))
	}
	if content.DeletionTimestamp == nil && (ref.UID == "" || !hasFinalizer(content, protocol.ContentBoundFinalizer)) {
		var err error
		if content, err = c.bindContent(ctx, content, vs); err != nil {
			return err
		}
	}
	vs, err := c.ensureSnapshotFinalizers(ctx, vs, content.Spec.DeletionPolicy, "")
	if err != nil {
		return err
	}
	if vs, err = c.mirrorStatus(ctx, vs, content); err != nil || vs == nil {
		return err
	}
	return c.releaseClaim(ctx, vs)
}

// bindContent fills the content's snapshot uid and adds its finalizer, in one write.
func (c *Controller) bindContent(ctx context.Context, content *snapshotv1.VolumeSnapshotContent, vs *snapshotv1.VolumeSnapshot) (*snapshotv1.VolumeSnapshotContent, error) {
	updated := content.DeepCopy()
	updated.Spec.VolumeSnapshotRef.UID = vs.UID
	updated.Spec.VolumeSnapshotRef.APIVersion = snapshotv1.SchemeGroupVersion.String()
	updated.Spec.VolumeSnapshotRef.Kind = "VolumeSnapshot"
	updated.Finalizers, _ = withFinalizers(updated.Finalizers, []string{protocol.ContentBoundFinalizer}, nil)
	klog.FromContext(ctx).V(2).Info("Binding content", "content", content.Name)
	bound, err := c.patchContent(ctx, content, updated)
	if err != nil {
		return nil, err
	}
	// Our own write raises no event. If vs was deleted while this sync ran, the content's sync
	// for that deletion may have run already and seen the content unbound; it must look again,
	// now that the content names vs, or a Delete-policy content would outlive its snapshot.
	c.contentQueue.Add(controller.KeyOf(bound))
	return bound, nil
}

// ensureSnapshotFinalizers adds the as-source finalizer, and the bound one for a Delete policy.
// A class chosen as the driver's default is recorded in the snapshot's spec in the same write.
func (c *Controller) ensureSnapshotFinalizers(ctx context.Context, vs *snapshotv1.VolumeSnapshot, policy snapshotv1.DeletionPolicy,
	defaultClass string) (*snapshotv1.VolumeSnapshot, error) {
	want := []string{protocol.SnapshotAsSourceFinalizer}
	if policy == snapshotv1.VolumeSnapshotContentDelete {
		want = append(want, protocol.SnapshotBoundFinalizer)
	}
	finalizers, changed := withFinalizers(vs.Finalizers, want, nil)
	recordClass := defaultClass != "" && vs.Spec.VolumeSnapshotClassName == nil
	if !changed && !recordClass {
		return vs, nil
	}
	updated := vs.DeepCopy()
	updated.Finalizers = finalizers
	if recordClass {
		updated.Spec.VolumeSnapshotClassName = &defaultClass
	}
	return c.patchSnapshot(ctx, vs, updated)
}

// mirrorStatus writes the snapshot status that the content's status implies. While a new content
// has no status yet, it waits up to StatusGrace so that binding and readiness usually land in one
// write; it then returns a nil snapshot and a requeue.
func (c *Controller) mirrorStatus(ctx context.Context, vs *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent) (*snapshotv1.VolumeSnapshot, error) {
	if vs.Status == nil && content.Status == nil {
		if wait := c.opts.StatusGrace - c.clock.Since(content.CreationTimestamp.Time); wait > 0 {
			return nil, controller.RequeueAfter(wait, "waiting for the sidecar's first report")
		}
	}
	want := desiredStatus(vs, content)
	if vs.Status != nil && equality.Semantic.DeepEqual(*vs.Status, *want) {
		return vs, nil
	}
	wasReady, hadError := isReady(vs), vs.Status != nil && vs.Status.Error != nil
	updated := vs.DeepCopy()
	updated.Status = want
	result, err := c.updateSnapshotStatus(ctx, updated)
	if err != nil {
		return nil, err
	}
	if g := c.groups.Load(); g != nil {
		g.onMember(result) // the group's readiness follows its members'; our own writes raise no event
	}
	switch {
	case isReady(result) && !wasReady:
		klog.FromContext(ctx).V(2).Info("Snapshot ready", "content", content.Name)
		metrics.Operations.WithLabelValues(metrics.OperationCreate, metrics.StatusSuccess).
			Observe(c.clock.Since(vs.CreationTimestamp.Time).Seconds())
		if c.opts.ReadyEvents {
			c.recorder.Event(result, corev1.EventTypeNormal, ReasonSnapshotReady, "Snapshot is ready to use")
		}
	case want.Error != nil && !hadError && want.Error.Message != nil:
		metrics.Operations.WithLabelValues(metrics.OperationCreate, metrics.StatusFailure).
			Observe(c.clock.Since(vs.CreationTimestamp.Time).Seconds())
		c.recorder.Event(result, corev1.EventTypeWarning, ReasonSnapshotFailed, *want.Error.Message)
	}
	return result, nil
}

// desiredStatus is vs's status as its bound content reports it.
func desiredStatus(vs *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent) *snapshotv1.VolumeSnapshotStatus {
	want := &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr(content.Name)}
	if vs.Status != nil {
		want.VolumeGroupSnapshotName = vs.Status.VolumeGroupSnapshotName
	}
	if group := groupOf(vs); group != "" {
		want.VolumeGroupSnapshotName = &group
	}
	st := content.Status
	if st == nil {
		want.ReadyToUse = ptr(false)
		return want
	}
	want.ReadyToUse = ptr(st.ReadyToUse != nil && *st.ReadyToUse)
	if st.CreationTime != nil {
		want.CreationTime = ptr(metav1.NewTime(time.Unix(0, *st.CreationTime).UTC().Truncate(time.Second)))
	}
	if st.RestoreSize != nil {
		want.RestoreSize = resource.NewQuantity(*st.RestoreSize, resource.BinarySI)
	}
	if st.Error != nil {
		want.Error = st.Error.DeepCopy()
	}
	return want
}

// fail reports bad input on vs: a Warning event and status.error, written once per message. The
// error is final: a change to the snapshot, its claim, class or content brings it back.
func (c *Controller) fail(ctx context.Context, vs *snapshotv1.VolumeSnapshot, reason string, cause error) error {
	msg := cause.Error()
	if vs.Status != nil && vs.Status.Error != nil && vs.Status.Error.Message != nil && *vs.Status.Error.Message == msg {
		return controller.Final(cause)
	}
	updated := vs.DeepCopy()
	if updated.Status == nil {
		updated.Status = &snapshotv1.VolumeSnapshotStatus{}
	}
	now := metav1.NewTime(c.clock.Now())
	updated.Status.Error = &snapshotv1.VolumeSnapshotError{Time: &now, Message: &msg}
	updated.Status.ReadyToUse = ptr(false)
	if _, err := c.updateSnapshotStatus(ctx, updated); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Snapshot failed", "reason", reason, "err", msg)
	c.recorder.Event(vs, corev1.EventTypeWarning, reason, msg)
	return controller.Final(cause)
}

func hasFinalizer(obj metav1.Object, finalizer string) bool {
	for _, f := range obj.GetFinalizers() {
		if f == finalizer {
			return true
		}
	}
	return false
}
