package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// kind is everything that differs between a content and a group content. The reconciler and
// its transitions are written once against it; each kind's file adapts its API type and its
// CSI calls. Methods that return T return a changed deep copy and never change their argument.
type kind[T kube.Object[T]] interface {
	// keys are the protocol keys of this kind.
	keys() kindKeys
	// spec is what the spec (and the group annotation) says, state what status says.
	spec(obj T) spec
	state(obj T) state
	// class returns the parameters of obj's class; nil when obj names no class.
	class(obj T) (map[string]string, error)
	// templates are the values secret templates may refer to.
	templates(obj T) protocol.TemplateValues
	// extraMetadata are the parameters --extra-create-metadata adds.
	extraMetadata(obj T) map[string]string

	// create asks the driver to make the backend snapshot and returns obj with its status.
	create(ctx context.Context, obj T, req createRequest) (T, error)
	// read asks the driver about the backend snapshot obj names and returns obj with its
	// status, or errUnknownHandle.
	read(ctx context.Context, obj T, secrets map[string]string) (T, error)
	// remove asks the driver to delete the backend snapshot with handle.
	remove(ctx context.Context, obj T, handle string, secrets map[string]string) error

	// withStatus returns a copy of obj with a status, and the fields of that status both kinds
	// have, to change.
	withStatus(obj T) (T, statusFields)
}

// lister reads objects of one kind from an informer's cache: the generated listers of the
// (cluster-scoped) content kinds have this shape.
type lister[T any] interface {
	Get(name string) (T, error)
}

// spec is what the reconciler reads of a spec.
type spec struct {
	driver string
	// member tells whether the object is a member of a group snapshot: no CSI call is ever made
	// for it.
	member bool
	// dynamic tells whether the object asks for a new backend snapshot (a volume source), as
	// opposed to importing an existing one (a handle source).
	dynamic bool
	// refUID is the uid of the bound (group) snapshot; empty while unbound.
	refUID types.UID
	policy snapshotv1.DeletionPolicy
	// handle is the backend handle a pre-provisioned object names, "" for none.
	handle string
	// inGroup tells whether the backend snapshot belongs to a group snapshot (the driver said so,
	// and status.volumeGroupSnapshotHandle records it): it goes with its group, and deleting the
	// object only lets it go, as upstream's sidecar does; drivers refuse to delete such a
	// snapshot alone.
	inGroup bool
}

// state is what the reconciler reads of a status.
type state struct {
	// reported tells whether there is a status at all.
	reported bool
	// handle is the backend handle, "" before the snapshot is created.
	handle string
	ready  bool
	// message is status.error.message, "" for none.
	message string
}

// stateOf reads the status fields both kinds have.
func stateOf(handle *string, ready *bool, e *snapshotv1.VolumeSnapshotError) state {
	s := state{reported: true, handle: ptr.Deref(handle, ""), ready: ptr.Deref(ready, false)}
	if e != nil {
		s.message = ptr.Deref(e.Message, "")
	}
	return s
}

// statusFields point at the status fields both kinds have, in a copy of an object.
type statusFields struct {
	handle **string
	ready  **bool
	err    **snapshotv1.VolumeSnapshotError
}

// deletable is the backend handle that deleting obj must remove, "" for none: the status handle
// once status exists, else the handle a pre-provisioned object names.
func deletable[T kube.Object[T]](k kind[T], obj T) string {
	if st := k.state(obj); st.reported {
		return st.handle
	}
	return k.spec(obj).handle
}

// withError returns obj with status.error set to msg at now.
func withError[T kube.Object[T]](k kind[T], obj T, msg string, now time.Time) T {
	obj, f := k.withStatus(obj)
	*f.err = &snapshotv1.VolumeSnapshotError{Time: &metav1.Time{Time: now}, Message: ptr.To(msg)}
	return obj
}

// withoutHandle returns obj with the backend handle and readiness cleared from status.
func withoutHandle[T kube.Object[T]](k kind[T], obj T) T {
	obj, f := k.withStatus(obj)
	*f.handle, *f.ready = nil, nil
	return obj
}

// classParameters are the parameters of the class named, nil when none is named.
func classParameters[C any](kind string, name *string, get func(string) (C, error), params func(C) map[string]string) (map[string]string, error) {
	if ptr.Deref(name, "") == "" {
		return nil, nil
	}
	class, err := get(*name)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s %s: %w", kind, *name, err)
	}
	return params(class), nil
}

// kindKeys are the protocol keys and names of one kind.
type kindKeys struct {
	// name is the kind's name in logs, events and metrics.
	name string
	// beingCreated, beingDeleted and finalizer are the annotations and finalizer of the kind.
	beingCreated, beingDeleted, finalizer string
	// deletionSecretName and deletionSecretNamespace are the annotations naming the secret for
	// deletion.
	deletionSecretName, deletionSecretNamespace string
	// createSecret names the secret for create and delete, readSecret the one for reading a
	// pre-provisioned snapshot.
	createSecret, readSecret protocol.SecretParams
}

// createRequest is what the driver needs to make a backend snapshot.
type createRequest struct {
	name       string
	parameters map[string]string
	secrets    map[string]string
}

// errUnknownHandle: the driver does not know the handle a pre-provisioned object names.
var errUnknownHandle = errors.New("the CSI driver does not know this snapshot handle")
