package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/csi"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Event reasons. The involved object tells a content from a group content.
const (
	reasonCreateFailed = "SnapshotCreationFailed"
	reasonCheckFailed  = "SnapshotCheckFailed"
	reasonDeleteFailed = "SnapshotDeleteFailed"
	reasonInputError   = "SnapshotInputError"
)

const deletePolicy = snapshotv1.VolumeSnapshotContentDelete

// Names of CSI operations in metrics.
const (
	opCreate = "create"
	opRead   = "read"
	opDelete = "delete"
)

// create sets being-created, asks the driver to create the backend snapshot and records the
// answer: the handle and readiness in status, or a final error. When the backend may still be
// working, being-created stays and the key is retried with backoff.
func (r *reconciler[T]) create(ctx context.Context, obj T) error {
	keys := r.kind.keys()
	req, err := r.createRequest(ctx, obj)
	if err != nil {
		return r.reportInput(ctx, obj, err)
	}
	if obj.GetAnnotations()[keys.beingCreated] == "" {
		if obj, err = r.writer.Patch(ctx, obj, kube.WithAnnotation(obj, keys.beingCreated, protocol.AnnValueYes)); err != nil {
			return err
		}
		klog.FromContext(ctx).V(2).Info("Creating backend snapshot", "name", req.name)
	}
	var result T
	err = r.call(ctx, opCreate, func(ctx context.Context) (err error) {
		result, err = r.kind.create(ctx, obj, req)
		return err
	})
	switch outcome(err) {
	case csi.Busy:
		return retrySoon("the driver is busy with the volume or snapshot", err)
	case csi.InProgress:
		return fmt.Errorf("the driver may still be creating %s: %w", req.name, err)
	case csi.Failed:
		return r.createFailed(ctx, obj, err)
	}
	return r.createDone(ctx, obj, result)
}

// createDone records a created snapshot: one status write, then being-created removed.
func (r *reconciler[T]) createDone(ctx context.Context, obj, result T) error {
	obj, err := r.writer.PatchStatus(ctx, obj, result)
	if err != nil {
		return err
	}
	if obj, err = r.writer.Patch(ctx, obj, kube.WithAnnotation(obj, r.kind.keys().beingCreated, "")); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Created backend snapshot", "ready", r.kind.state(obj).ready)
	return r.waitReady(ctx, obj)
}

// createFailed records a final create error: status.error, a Warning event, being-created
// removed. Creation is not tried again until the object changes.
func (r *reconciler[T]) createFailed(ctx context.Context, obj T, cause error) error {
	msg := "Failed to create snapshot: " + cause.Error()
	obj, err := r.writer.PatchStatus(ctx, obj, withError(r.kind, obj, msg, r.clock.Now()))
	if err != nil {
		return err
	}
	r.event(obj, corev1.EventTypeWarning, reasonCreateFailed, msg)
	if obj, err = r.writer.Patch(ctx, obj, kube.WithAnnotation(obj, r.kind.keys().beingCreated, "")); err != nil {
		return err
	}
	r.markFailed(controller.KeyOf(obj), obj)
	return controller.Final(cause)
}

// refresh reads the state of a backend snapshot that is known but not ready, or named by a
// pre-provisioned object, and writes status only when it changed.
func (r *reconciler[T]) refresh(ctx context.Context, obj T) error {
	op, ask, err := r.checkRequest(ctx, obj)
	if err != nil {
		return r.reportInput(ctx, obj, err)
	}
	var result T
	err = r.call(ctx, op, func(ctx context.Context) (err error) {
		result, err = ask(ctx)
		return err
	})
	if err != nil {
		return r.checkFailed(ctx, obj, err)
	}
	if obj, err = r.writer.PatchStatus(ctx, obj, result); err != nil {
		return err
	}
	return r.waitReady(ctx, obj)
}

// checkRequest is the CSI call that tells the state of obj's backend snapshot, with its name in
// metrics: the create again for a dynamic object (the driver answers a repeated create with the
// snapshot it made), a read for a pre-provisioned one.
func (r *reconciler[T]) checkRequest(ctx context.Context, obj T) (string, func(context.Context) (T, error), error) {
	if r.kind.spec(obj).dynamic {
		req, err := r.createRequest(ctx, obj)
		return opCreate, func(ctx context.Context) (T, error) { return r.kind.create(ctx, obj, req) }, err
	}
	secrets, err := r.readSecret(ctx, obj)
	return opRead, func(ctx context.Context) (T, error) { return r.kind.read(ctx, obj, secrets) }, err
}

// checkFailed records a failed status check: a final error goes to status.error with a
// Warning event and is not retried until the object changes; others are retried.
func (r *reconciler[T]) checkFailed(ctx context.Context, obj T, cause error) error {
	switch outcome(cause) {
	case csi.Busy:
		return retrySoon("the driver is busy with the volume or snapshot", cause)
	case csi.InProgress:
		return fmt.Errorf("check snapshot status: %w", cause)
	}
	if err := r.report(ctx, obj, reasonCheckFailed, "Failed to check snapshot status: "+cause.Error()); err != nil {
		return err
	}
	return controller.Final(cause)
}

// waitReady asks for another look at an object whose snapshot is not ready yet, after a delay
// that doubles per check up to --retry-interval-max. No write is made to trigger it.
func (r *reconciler[T]) waitReady(ctx context.Context, obj T) error {
	key := controller.KeyOf(obj).String()
	if r.kind.state(obj).ready {
		r.readiness.Reset(key)
		return nil
	}
	r.readiness.Next(key, r.clock.Now())
	return controller.RequeueAfter(r.readiness.Get(key), "snapshot not ready to use")
}

// deleteBackend deletes the backend snapshot of an object being deleted with policy Delete and
// releases the object. The handle is cleared from status first only when another finalizer keeps
// the object after the release; otherwise nobody could read the cleared status, and a retry
// after a failed release merely repeats the idempotent DeleteSnapshot.
func (r *reconciler[T]) deleteBackend(ctx context.Context, obj T) error {
	secrets, err := r.deletionSecret(ctx, obj)
	if err != nil {
		return r.reportInput(ctx, obj, err)
	}
	handle := deletable(r.kind, obj)
	err = r.call(ctx, opDelete, func(ctx context.Context) error { return r.kind.remove(ctx, obj, handle, secrets) })
	if err != nil {
		switch outcome(err) {
		case csi.Busy:
			return retrySoon("the driver is busy with the snapshot", err)
		case csi.Failed:
			if err := r.report(ctx, obj, reasonDeleteFailed, "Failed to delete snapshot: "+err.Error()); err != nil {
				return err
			}
		}
		// Other errors are retried with backoff, final or not: the object is going away.
		return fmt.Errorf("delete backend snapshot %s: %w", handle, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted backend snapshot", "handle", handle)
	if len(kube.WithoutFinalizer(obj, r.kind.keys().finalizer).GetFinalizers()) > 0 {
		if obj, err = r.writer.PatchStatus(ctx, obj, withoutHandle(r.kind, obj)); err != nil {
			return err
		}
	}
	return r.release(ctx, obj)
}

// release removes the bound-protection finalizer: nothing is left to do in the backend.
func (r *reconciler[T]) release(ctx context.Context, obj T) error {
	changed := kube.WithoutFinalizer(obj, r.kind.keys().finalizer)
	if _, err := r.writer.Patch(ctx, obj, changed); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Removed finalizer")
	key := controller.KeyOf(obj)
	r.forget(key)
	if obj.GetDeletionTimestamp() != nil && len(changed.GetFinalizers()) == 0 {
		r.markReleased(key, obj)
	}
	return nil
}

// reportInput records a problem with what the sidecar needs before it can call the driver (a
// class, a secret): status.error and a Warning event. A Final problem is not retried until the
// object changes; others (a secret not created yet) are retried with backoff.
func (r *reconciler[T]) reportInput(ctx context.Context, obj T, cause error) error {
	if err := r.report(ctx, obj, reasonInputError, cause.Error()); err != nil {
		return err
	}
	if controller.IsFinal(cause) {
		if latest := r.writer.Cache().Latest(obj); latest.GetAnnotations()[r.kind.keys().beingCreated] == "" {
			r.markFailed(controller.KeyOf(latest), latest)
		}
	}
	return cause
}

// report writes msg to status.error, unless it is there already, and records a Warning event.
func (r *reconciler[T]) report(ctx context.Context, obj T, reason, msg string) error {
	klog.FromContext(ctx).V(2).Info("Snapshot error", "reason", reason, "message", msg)
	if r.kind.state(obj).message == msg {
		return nil
	}
	if _, err := r.writer.PatchStatus(ctx, obj, withError(r.kind, obj, msg, r.clock.Now())); err != nil {
		return err
	}
	r.event(obj, corev1.EventTypeWarning, reason, msg)
	return nil
}

// createRequest gathers the name, parameters and secrets for the driver's create call.
func (r *reconciler[T]) createRequest(ctx context.Context, obj T) (createRequest, error) {
	uid := r.kind.spec(obj).refUID
	if uid == "" {
		return createRequest{}, controller.Final(errors.New("the object is not bound: its snapshot reference has no uid"))
	}
	params, err := r.kind.class(obj)
	if err != nil {
		return createRequest{}, err
	}
	secrets, err := r.secret(ctx, obj, params, r.kind.keys().createSecret)
	if err != nil {
		return createRequest{}, err
	}
	driverParams := protocol.DriverParameters(params)
	if r.cfg.extraCreateMetadata {
		for k, v := range r.kind.extraMetadata(obj) {
			driverParams[k] = v
		}
	}
	return createRequest{name: protocol.BackendName(r.cfg.namePrefix, uid, r.cfg.uuidLength), parameters: driverParams, secrets: secrets}, nil
}

// readSecret is the secret for reading a pre-provisioned snapshot, named by its class if any.
func (r *reconciler[T]) readSecret(ctx context.Context, obj T) (map[string]string, error) {
	params, err := r.kind.class(obj)
	if err != nil {
		return nil, err
	}
	return r.secret(ctx, obj, params, r.kind.keys().readSecret)
}

// call runs one CSI operation and records its duration and outcome.
func (r *reconciler[T]) call(ctx context.Context, op string, fn func(context.Context) error) error {
	start := r.clock.Now()
	err := fn(ctx)
	r.metrics.operation(r.kind.keys().name, op, outcome(err), r.clock.Since(start))
	return err
}

// outcome is csi.Classify, with an unknown pre-provisioned handle counted as final.
func outcome(err error) csi.Outcome {
	if errors.Is(err, errUnknownHandle) {
		return csi.Failed
	}
	return csi.Classify(err)
}

// busyRetry is how soon a call that the driver refused as busy (csi.Busy) is made again: the
// operation it is busy with usually ends within a moment, and waiting out a failure's doubling
// backoff instead only leaves a tail of snapshots that wait for nothing.
const busyRetry = 250 * time.Millisecond

// retrySoon asks for another try after busyRetry plus up to as much again of jitter, so that the
// objects waiting for one volume do not all come back at the same instant. It counts no failure.
func retrySoon(reason string, err error) error {
	return controller.RequeueAfter(wait.Jitter(busyRetry, 1), reason+": "+err.Error())
}
