package sidecar

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Invariants of the reconciler, for both kinds:
//   - The being-created annotation is written before the driver is asked to create, and removed
//     only after the result (a handle or a final error) is in status. So an object without it
//     either has its handle in status or has nothing in the backend.
//   - Nothing is deleted from the backend while being-created is set: a create that timed out is
//     finished first, so its result is known and can be deleted.
//   - Every change is one patch with a resourceVersion precondition, remembered in the own-write
//     cache; the next sync reads through that cache, so a stale lister copy never causes a
//     second write. Nothing is written only to trigger another sync.
//   - A member of a group never gets a CSI call of its own.
//   - Secrets are read with a GET when a call needs them and never logged.

// fieldManager names the sidecar's writes.
const fieldManager = "csi-snapshotter"

// config are the settings shared by the reconcilers.
type config struct {
	driver               string
	node                 string // --node-deployment: only objects labelled managed-by this node
	namePrefix           string
	uuidLength           int
	extraCreateMetadata  bool
	retryStart, retryMax time.Duration
	syncTimeout          time.Duration
	workers              int
}

// reconciler reconciles the objects of one kind that belong to this sidecar's driver.
type reconciler[T kube.Object[T]] struct {
	kind     kind[T]
	objects  lister[T]
	cfg      config
	kube     kubernetes.Interface // Secret GETs only
	recorder record.EventRecorder
	// writer is the reconciler's only way to change objects.
	writer  *kube.Writer[T]
	metrics *metrics
	clock   clock.Clock
	// readiness spaces the checks of snapshots that are not ready yet, per key.
	readiness *flowcontrol.Backoff

	// failedAt holds, per key, the resourceVersion the sidecar wrote a final create error at:
	// creation is not tried again until someone else changes the object.
	failedAt *marks[string]
	// released holds, per key, the uid of an object whose last finalizer the sidecar removed
	// while it was being deleted. The API server answers such a write with the object as it
	// was before (it is gone now), so the own-write cache cannot tell that copy from a stale one.
	released *marks[types.UID]
}

// marks remember one value per key.
type marks[V comparable] struct {
	mu sync.Mutex
	m  map[controller.Key]V
}

func newMarks[V comparable]() *marks[V] { return &marks[V]{m: map[controller.Key]V{}} }

// is tells whether v is the value remembered for key (the zero value when none is).
func (m *marks[V]) is(key controller.Key, v V) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[key] == v
}

func (m *marks[V]) set(key controller.Key, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[key] = v
}

func (m *marks[V]) forget(key controller.Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
}

// newReconciler is the reconciler of kind k, which reads objects from the informer's lister and
// writes them through the generated client.
func newReconciler[T kube.Object[T]](k kind[T], objects lister[T], client kube.Client[T], cfg config, kubeClient kubernetes.Interface,
	recorder record.EventRecorder, m *metrics) *reconciler[T] {
	return &reconciler[T]{
		kind: k, objects: objects, cfg: cfg, kube: kubeClient, recorder: recorder, metrics: m,
		writer: kube.NewWriter(k.keys().name, func(string) kube.Client[T] { return client },
			controller.NewWrites[T]().WithTrim(controller.Trimmed[T](controller.TrimMeta)),
			kube.WriterOptions{FieldManager: fieldManager, Count: m.write}),
		clock:     clock.RealClock{},
		readiness: flowcontrol.NewBackOff(cfg.retryStart, cfg.retryMax),
		failedAt:  newMarks[string](),
		released:  newMarks[types.UID](),
	}
}

// mine tells whether obj is this sidecar's to reconcile.
func (r *reconciler[T]) mine(obj T) bool {
	if r.kind.spec(obj).driver != r.cfg.driver {
		return false
	}
	return r.cfg.node == "" || obj.GetLabels()[protocol.LabelManagedBy] == r.cfg.node
}

// settled tells whether obj is this sidecar's and likely to need nothing: ready and not being
// deleted (controller.FirstList).
func (r *reconciler[T]) settled(obj T) bool {
	return r.mine(obj) && obj.GetDeletionTimestamp() == nil && r.kind.state(obj).ready
}

// sync is the state diagram: it finds the one transition obj is due for.
func (r *reconciler[T]) sync(ctx context.Context, key controller.Key) error {
	listed, err := r.objects.Get(key.Name)
	if apierrors.IsNotFound(err) {
		r.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	obj := r.writer.Cache().Latest(listed)
	if !r.mine(obj) || r.isReleased(key, obj) {
		return nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), r.kind.keys().name, klog.KObj(obj))
	ctx = klog.NewContext(ctx, logger)
	keys, spec, st := r.kind.keys(), r.kind.spec(obj), r.kind.state(obj)
	creating := obj.GetAnnotations()[keys.beingCreated] != ""
	switch {
	case obj.GetDeletionTimestamp() != nil && !creating:
		return r.syncDeletion(ctx, obj)
	case spec.member:
		return nil
	case creating:
		return r.create(ctx, obj)
	case spec.dynamic && st.handle == "":
		if st.message != "" && r.failedSince(key, obj) {
			logger.V(4).Info("Create failed before, waiting for a change")
			return nil
		}
		return r.create(ctx, obj)
	case st.handle == "" || !st.ready:
		return r.refresh(ctx, obj)
	default:
		r.readiness.Reset(key.String())
		return nil
	}
}

// syncDeletion handles an object that is being deleted.
func (r *reconciler[T]) syncDeletion(ctx context.Context, obj T) error {
	keys, spec := r.kind.keys(), r.kind.spec(obj)
	if !slices.Contains(obj.GetFinalizers(), keys.finalizer) {
		return nil
	}
	switch {
	case spec.member, spec.inGroup, spec.policy != deletePolicy, !spec.dynamic && spec.refUID == "":
		return r.release(ctx, obj)
	case obj.GetAnnotations()[keys.beingDeleted] == "":
		klog.FromContext(ctx).V(4).Info("Waiting for the snapshot controller to mark the object being deleted")
		return nil
	case deletable(r.kind, obj) != "":
		return r.deleteBackend(ctx, obj)
	default:
		return r.release(ctx, obj)
	}
}

// failedSince tells whether obj is unchanged since the sidecar recorded a final create error.
func (r *reconciler[T]) failedSince(key controller.Key, obj T) bool {
	return r.failedAt.is(key, obj.GetResourceVersion())
}

func (r *reconciler[T]) markFailed(key controller.Key, obj T) {
	r.failedAt.set(key, obj.GetResourceVersion())
}

// isReleased tells whether the sidecar removed obj's last finalizer while it was being deleted.
func (r *reconciler[T]) isReleased(key controller.Key, obj T) bool {
	return r.released.is(key, obj.GetUID())
}

func (r *reconciler[T]) markReleased(key controller.Key, obj T) { r.released.set(key, obj.GetUID()) }

func (r *reconciler[T]) forget(key controller.Key) {
	r.failedAt.forget(key)
	r.released.forget(key)
	r.readiness.Reset(key.String())
}

// secret reads the secret params names for obj; nil when none is named. A template error is
// the user's to fix (Final); a secret that cannot be read may appear later.
func (r *reconciler[T]) secret(ctx context.Context, obj T, params map[string]string, keys protocol.SecretParams) (map[string]string, error) {
	ref, err := protocol.ResolveSecret(params, keys, r.kind.templates(obj))
	if err != nil {
		return nil, controller.Final(err)
	}
	if ref == nil {
		return nil, nil
	}
	return r.getSecret(ctx, *ref)
}

// getSecret GETs one secret and returns its data as strings.
func (r *reconciler[T]) getSecret(ctx context.Context, ref types.NamespacedName) (map[string]string, error) {
	s, err := r.kube.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("cannot read secret %s: %w", ref, err)
	}
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// deletionSecret is the secret for deleting obj: the one its annotations name, else the one
// its class names.
func (r *reconciler[T]) deletionSecret(ctx context.Context, obj T) (map[string]string, error) {
	keys := r.kind.keys()
	ann := obj.GetAnnotations()
	if name, ns := ann[keys.deletionSecretName], ann[keys.deletionSecretNamespace]; name != "" || ns != "" {
		return r.getSecret(ctx, types.NamespacedName{Namespace: ns, Name: name})
	}
	params, err := r.kind.class(obj)
	if err != nil {
		// The class may be gone by now; then it names no secret.
		klog.FromContext(ctx).V(4).Info("No class for the deletion secret", "err", err)
		params = nil
	}
	return r.secret(ctx, obj, params, keys.createSecret)
}

// event records an event about obj with one of the constant reasons.
func (r *reconciler[T]) event(obj T, eventType, reason, msg string) {
	r.recorder.Event(obj, eventType, reason, msg)
}
