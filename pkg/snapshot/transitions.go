package snapshot

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// The transitions both pairs of kinds share. Each reads its object, changes a copy, makes one
// write through the write layer (writes.go), which remembers it, and records an event where the
// protocol wants one.

func fmtMissing(kind, name string) error { return fmt.Errorf("%s %s does not exist", kind, name) }

// provision takes a dynamic snapshot's first steps: the kind's checks build the content, the
// snapshot gets its finalizers, and the content is created for the sidecar.
func (r *reconciler[S, C]) provision(ctx context.Context, s S) error {
	p, err := r.kind.plan(ctx, s)
	var bad *inputError
	if errors.As(err, &bad) {
		return r.fail(ctx, s, bad.reason, bad.err)
	} else if err != nil {
		return err
	}
	// The snapshot's finalizers go on before prepare's write (the claim's finalizer): a snapshot
	// deleted between the two must still be finalized, which releases the claim. The other way
	// round it could be gone at once and leave the claim protected for good.
	if s, err = r.ensureFinalizers(ctx, s, p.policy, p.class); err != nil {
		return err
	}
	if p.prepare != nil {
		if err := p.prepare(ctx); err != nil {
			return err
		}
	}
	created, err := r.contents.Create(ctx, p.content)
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier try whose result the lister has not seen yet.
		return controller.RequeueAfter(0, "content exists; waiting for the informer")
	} else if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Created content", "content", created.GetName(), "class", p.class)
	return r.syncBound(ctx, s, created)
}

// syncBound checks that s and c point at each other, binds a pre-provisioned content, keeps the
// finalizers, runs the kind's steps and writes the status the content implies.
func (r *reconciler[S, C]) syncBound(ctx context.Context, s S, c C) error {
	ref := r.kind.ref(c)
	if !r.refersTo(c, s) {
		return r.fail(ctx, s, r.keys.reasonBindingInvalid, fmt.Errorf("%s %s is bound to %s %s/%s (uid %q), not to this one",
			r.keys.contentKind, c.GetName(), r.keys.snapshotKind, ref.Namespace, ref.Name, ref.UID))
	}
	var err error
	if c.GetDeletionTimestamp() == nil && (ref.UID == "" || !kube.HasFinalizer(c, r.keys.contentFinalizer)) {
		if c, err = r.bind(ctx, c, s); err != nil {
			return err
		}
	}
	if s, err = r.ensureFinalizers(ctx, s, r.kind.info(c).policy, ""); err != nil {
		return err
	}
	membersReady, err := r.kind.bound(ctx, s, c)
	if err != nil {
		return err
	}
	if !r.kind.state(s).reported && !r.kind.info(c).reported {
		if wait := r.statusGrace - r.clock.Since(c.GetCreationTimestamp().Time); wait > 0 {
			return controller.RequeueAfter(wait, "waiting for the sidecar's first report")
		}
	}
	if s, err = r.writeStatus(ctx, s, r.kind.withStatus(s, c, membersReady), r.kind.info(c).driver); err != nil {
		return err
	}
	return r.kind.afterBound(ctx, s)
}

// bind fills the content's snapshot uid and adds its finalizer, in one write.
func (r *reconciler[S, C]) bind(ctx context.Context, c C, s S) (C, error) {
	updated := c.DeepCopy()
	ref := r.kind.ref(updated)
	ref.UID, ref.APIVersion, ref.Kind = s.GetUID(), r.keys.apiVersion, r.keys.snapshotKind
	finalizers, _ := kube.WithFinalizers(updated.GetFinalizers(), []string{r.keys.contentFinalizer}, nil)
	updated.SetFinalizers(finalizers)
	klog.FromContext(ctx).V(2).Info("Binding content", "content", c.GetName())
	bound, err := r.contents.Patch(ctx, c, updated)
	if err != nil {
		return bound, err
	}
	// Our own write raises no event. If s was deleted while this sync ran, the content's sync for
	// that deletion may have run already and seen the content unbound; it must look again, now
	// that the content names s, or a Delete-policy content would outlive its snapshot.
	r.contentQueue.Add(controller.KeyOf(bound))
	return bound, nil
}

// ensureFinalizers adds the snapshot's finalizers for a content with policy. A class chosen as
// the driver's default is recorded in the snapshot's spec in the same write.
func (r *reconciler[S, C]) ensureFinalizers(ctx context.Context, s S, policy snapshotv1.DeletionPolicy, class string) (S, error) {
	finalizers, changed := kube.WithFinalizers(s.GetFinalizers(), r.kind.finalizers(policy), nil)
	updated := s
	if class != "" {
		var recorded bool
		updated, recorded = r.kind.withClass(s, class)
		changed = changed || recorded
	}
	if !changed {
		return s, nil
	}
	updated = updated.DeepCopy()
	updated.SetFinalizers(finalizers)
	return r.snapshots.Patch(ctx, s, updated)
}

// writeStatus writes updated's status when it differs from s's, and reports a snapshot that
// became ready and, where the kind does, one whose content failed; driver is the content's.
func (r *reconciler[S, C]) writeStatus(ctx context.Context, s, updated S, driver string) (S, error) {
	before := r.kind.state(s)
	failedReason, reportsFailure := r.kind.contentFailure()
	if before.reported && equality.Semantic.DeepEqual(r.kind.status(s), r.kind.status(updated)) {
		return s, nil
	}
	result, err := r.snapshots.UpdateStatus(ctx, updated)
	if err != nil {
		return s, err
	}
	r.kind.changed(result)
	after := r.kind.state(result)
	r.observeStatus(s, before, after, driver)
	switch {
	case after.ready && !before.ready:
		klog.FromContext(ctx).V(2).Info("Snapshot ready")
		r.observe(r.keys.opCreate, metrics.StatusSuccess, s.GetCreationTimestamp())
		if r.readyEvents {
			r.recorder.Event(result, corev1.EventTypeNormal, r.keys.reasonReady, r.keys.readyMessage)
		}
	case reportsFailure && after.err != nil && before.err == nil && after.err.Message != nil:
		r.observe(r.keys.opCreate, metrics.StatusFailure, s.GetCreationTimestamp())
		r.recorder.Event(result, corev1.EventTypeWarning, failedReason, *after.err.Message)
	}
	return result, nil
}

// fail reports bad input on s: a Warning event and status.error, written once per message. The
// error is final: a change to the snapshot or to an object it depends on brings it back.
func (r *reconciler[S, C]) fail(ctx context.Context, s S, reason string, cause error) error {
	msg := cause.Error()
	if e := r.kind.state(s).err; e != nil && e.Message != nil && *e.Message == msg {
		return controller.Final(cause)
	}
	now := metav1.NewTime(r.clock.Now())
	if _, err := r.snapshots.UpdateStatus(ctx, r.kind.withError(s, &snapshotv1.VolumeSnapshotError{Time: &now, Message: &msg})); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Snapshot failed", "reason", reason, "err", msg)
	r.recorder.Event(s, corev1.EventTypeWarning, reason, msg)
	if r.kind.inputFailureCounts() {
		r.observe(r.keys.opCreate, metrics.StatusFailure, s.GetCreationTimestamp())
	}
	return controller.Final(cause)
}

func (r *reconciler[S, C]) observe(op, status string, since metav1.Time) {
	metrics.Operations.WithLabelValues(op, status).Observe(r.clock.Since(since.Time).Seconds())
}

// finalize runs when a snapshot is being deleted. Unless the kind holds it, a Delete-policy
// content is handed to the sidecar (annotated being-deleted, then deleted), and the snapshot's
// finalizers are dropped.
func (r *reconciler[S, C]) finalize(ctx context.Context, s S) error {
	c, found, err := r.contentOf(s)
	if err != nil {
		return err
	}
	ours, err := r.kind.finalizing(ctx, s, c, found)
	if err != nil || len(ours) == 0 {
		return err
	}
	if found && r.refersTo(c, s) && r.kind.info(c).policy == snapshotv1.VolumeSnapshotContentDelete {
		if err := r.release(ctx, c, true); err != nil {
			return err
		}
	}
	// What the kind releases goes first: once the last finalizer is off the snapshot is gone, and
	// no later sync would retry it if its write failed.
	if err := r.kind.releasing(ctx, s); err != nil {
		return err
	}
	updated := s.DeepCopy()
	finalizers, _ := kube.WithFinalizers(s.GetFinalizers(), nil, ours)
	updated.SetFinalizers(finalizers)
	if _, err := r.snapshots.Patch(ctx, s, updated); err != nil {
		return ignoreNotFound(err)
	}
	klog.FromContext(ctx).V(2).Info("Snapshot released")
	r.observe(r.keys.opDelete, metrics.StatusSuccess, *s.GetDeletionTimestamp())
	r.observeDeleted(s)
	return nil
}

// syncContent looks after a content whose snapshot is gone: with a Delete policy, or when the
// content itself is being deleted, it goes to the sidecar. Contents whose snapshot exists are
// handled by that snapshot's sync; unbound pre-provisioned ones wait for a snapshot to name them;
// group members are their group's business.
func (r *reconciler[S, C]) syncContent(ctx context.Context, c C) error {
	ref := r.kind.ref(c)
	if ref.UID == "" || r.kind.info(c).member || r.handedOver(c) {
		return nil
	}
	gone, err := r.snapshotGone(ctx, c)
	if err != nil || !gone {
		return err
	}
	deletePolicy := r.kind.info(c).policy == snapshotv1.VolumeSnapshotContentDelete
	if c.GetDeletionTimestamp() == nil && !deletePolicy {
		return nil // Retain: the content outlives its snapshot
	}
	return r.release(ctx, c, deletePolicy)
}

// handedOver tells whether a content is already the sidecar's: marked being-deleted and, with a
// Delete policy, deleted. Releasing it again would write nothing, so its snapshot is not looked up
// (a lister miss would cost a live GET for every later change the sidecar makes to it).
func (r *reconciler[S, C]) handedOver(c C) bool {
	_, marked := c.GetAnnotations()[r.keys.beingDeleted]
	return marked && (c.GetDeletionTimestamp() != nil || r.kind.info(c).policy != snapshotv1.VolumeSnapshotContentDelete)
}

// snapshotGone tells whether the snapshot a content is bound to no longer exists.
func (r *reconciler[S, C]) snapshotGone(ctx context.Context, c C) (bool, error) {
	ref := r.kind.ref(c)
	return r.gone(ctx, ref.Namespace, ref.Name, ref.UID)
}

// gone tells whether the snapshot namespace/name with uid no longer exists. A lister miss is
// confirmed with the API server, so a slow informer never costs a backend snapshot.
func (r *reconciler[S, C]) gone(ctx context.Context, namespace, name string, uid types.UID) (bool, error) {
	s, err := r.cachedSnapshot(namespace, name)
	if apierrors.IsNotFound(err) {
		s, err = r.kind.liveSnapshot(ctx, namespace, name)
	}
	if apierrors.IsNotFound(err) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	return s.GetUID() != uid, nil
}

// release marks a content whose snapshot is gone or going as being-deleted and, for a Delete
// policy, deletes it. It never does so while the sidecar may still be creating it, and never
// deletes a content without its bound-protection finalizer: a DELETE would remove it at once and
// the sidecar would never delete its backend snapshot. A content that lacks the finalizer (an
// imported or re-applied one, or one whose policy was changed to Delete) gets it in the same
// write as the annotation.
func (r *reconciler[S, C]) release(ctx context.Context, c C, deletePolicy bool) error {
	annotations := c.GetAnnotations()
	if _, creating := annotations[r.keys.beingCreated]; creating {
		return controller.RequeueAfter(beingCreatedWait, "content is still being created")
	}
	deleting := c.GetDeletionTimestamp() != nil
	protect := deletePolicy && !deleting && !kube.HasFinalizer(c, r.keys.contentFinalizer)
	if _, marked := annotations[r.keys.beingDeleted]; !marked || protect {
		updated, err := r.contents.Patch(ctx, c, r.marked(ctx, c, protect))
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		c = updated
	}
	if deletePolicy && deleting && !kube.HasFinalizer(c, r.keys.contentFinalizer) {
		// Deleted by someone else before it was protected; nobody can delete its backend snapshot.
		klog.FromContext(ctx).Info("Content deleted without its finalizer: its backend snapshot is not deleted",
			"content", c.GetName())
	}
	if deleting || !deletePolicy {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Deleting content", "content", c.GetName())
	if err := r.contents.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// marked is c annotated being-deleted and, with protect, with the bound-protection finalizer.
func (r *reconciler[S, C]) marked(ctx context.Context, c C, protect bool) C {
	updated := kube.WithAnnotation(c, r.keys.beingDeleted, protocol.AnnValueYes)
	if protect {
		finalizers, _ := kube.WithFinalizers(updated.GetFinalizers(), []string{r.keys.contentFinalizer}, nil)
		updated.SetFinalizers(finalizers)
		klog.FromContext(ctx).V(2).Info("Protecting content before deleting it", "content", c.GetName())
	}
	return updated
}
