package snapshot

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/listers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// kind is everything that differs between the two pairs of kinds the controller reconciles: a
// VolumeSnapshot with its VolumeSnapshotContent, and a VolumeGroupSnapshot with its
// VolumeGroupSnapshotContent. The reconciler and its transitions are written once against it
// (reconciler.go, transitions.go); single.go and group.go adapt the API types and add the steps
// only one pair has. S is the snapshot side, C the content side. Methods that return S or C
// return a changed deep copy and never change their argument.
type kind[S kube.Object[S], C kube.Object[C]] interface {
	keys() kindKeys

	// liveSnapshot reads a snapshot from the API server (the reconciler reads the informers'
	// caches itself).
	liveSnapshot(ctx context.Context, namespace, name string) (S, error)
	// state is what s's status says; status is the status itself, to compare.
	state(s S) snapshotState
	status(s S) any
	// sourceContent is the content name a pre-provisioned snapshot names, "" for none.
	sourceContent(s S) string
	// waitsForContent tells whether s waits for someone else to create its content (a member of
	// a group, whose group makes it).
	waitsForContent(s S) bool
	// withError returns s with e in status and not ready; withStatus returns s with the status
	// its content c (and, for a group, its members' readiness) implies.
	withError(s S, e *snapshotv1.VolumeSnapshotError) S
	withStatus(s S, c C, membersReady bool) S
	// contentFailure is the Warning event reason of a snapshot whose content reports an error,
	// which is then also counted as a failed create; ok is false where such an error shows in
	// status only.
	contentFailure() (reason string, ok bool)
	// inputFailureCounts tells whether bad input (fail) counts as a failed create.
	inputFailureCounts() bool
	// finalizers are the snapshot's finalizers while bound to a content with policy.
	finalizers(policy snapshotv1.DeletionPolicy) []string
	// withClass returns s with class recorded as its class, and whether that changed it.
	withClass(s S, class string) (S, bool)
	// classDriver is the driver of the class s names, "" when unknown.
	classDriver(s S) string

	// ref is the content's reference to its snapshot, inside c (change it on a copy only).
	ref(c C) *corev1.ObjectReference
	// info is what the reconciler reads of c besides its reference.
	info(c C) contentInfo

	// plan checks a dynamic snapshot's input and builds its content.
	plan(ctx context.Context, s S) (plan[C], error)
	// bound runs the steps of a bound snapshot before its status is written and tells whether
	// its members (for a group) are ready.
	bound(ctx context.Context, s S, c C) (bool, error)
	// changed learns of a change to s: one the informer delivered, or a status the controller
	// wrote, which raises no event.
	changed(s S)
	// afterBound runs after a bound snapshot's status is current.
	afterBound(ctx context.Context, s S) error
	// finalizing runs first when s is being deleted: it returns the finalizers of s to drop now,
	// or none to stop here (s is held, or there is nothing left to do).
	finalizing(ctx context.Context, s S, c C, found bool) ([]string, error)
	// releasing runs before s's finalizers are dropped (its source claim's protection).
	releasing(ctx context.Context, s S) error
}

// snapshotState is what the reconciler reads of a snapshot's status.
type snapshotState struct {
	// reported tells whether the snapshot has a status at all.
	reported bool
	// content is the content name the status records as bound, "" for none.
	content string
	ready   bool
	// created tells whether status.creationTime is set: the backend has cut the snapshot.
	created bool
	// err is status.error, nil for none.
	err *snapshotv1.VolumeSnapshotError
}

// contentInfo is what the reconciler reads of a content.
type contentInfo struct {
	policy snapshotv1.DeletionPolicy
	driver string
	// reported tells whether the sidecar has written the content's status.
	reported bool
	// member tells whether the content is a member of a group: its group looks after it.
	member bool
}

// kindKeys are the names, protocol keys and event reasons of one pair of kinds.
type kindKeys struct {
	// snapshotKind and contentKind are the kinds' names; apiVersion is the snapshot kind's.
	snapshotKind, contentKind, apiVersion string
	// snapshotQueue and contentQueue name the queues and the objects in logs.
	snapshotQueue, contentQueue string
	// snapshotResource and contentResource name the kinds in the listers' NotFound errors.
	snapshotResource, contentResource schema.GroupResource
	// defaultContent is the content name of a dynamic snapshot with uid.
	defaultContent func(uid types.UID) string
	// contentFinalizer is the content's bound-protection finalizer; beingCreated and
	// beingDeleted are the sidecar's annotations on it.
	contentFinalizer, beingCreated, beingDeleted string
	// classKind is the class kind's name; secret are the class parameters that name the
	// deletion secret, which secretName and secretNamespace annotate on a dynamic content.
	classKind                   string
	secret                      protocol.SecretParams
	secretName, secretNamespace string
	// Event reasons.
	reasonContentMissing, reasonBindingInvalid, reasonReady, readyMessage string
	// opCreate and opDelete are the operations in metrics.
	opCreate, opDelete string
	// upstream names the operations in the upstream image's metrics.
	upstream upstreamOps
}

// plan is what provisioning makes: the content to create, with its policy and class.
type plan[C any] struct {
	content C
	policy  snapshotv1.DeletionPolicy
	class   string
	// prepare, when set, is a write that must land after the snapshot's finalizers and before
	// the content is created.
	prepare func(ctx context.Context) error
}

// inputError is bad user input found by plan: reported on the snapshot with reason.
type inputError struct {
	reason string
	err    error
}

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// reconciler reconciles one pair of kinds: the snapshots and their contents.
type reconciler[S kube.Object[S], C kube.Object[C]] struct {
	kind      kind[S, C]
	keys      kindKeys
	snapshots *kube.Writer[S]
	contents  *kube.Writer[C]
	// snapshotLister and contentLister read the informers' caches; they are what the generated
	// listers are built on.
	snapshotLister listers.ResourceIndexer[S]
	contentLister  listers.ResourceIndexer[C]
	recorder       record.EventRecorder
	clock          clock.PassiveClock
	// readyEvents records a Normal event when a snapshot becomes ready.
	readyEvents bool
	// statusGrace is how long a new content's status waits for the sidecar's first report.
	statusGrace time.Duration

	snapshotQueue, contentQueue *controller.Queue[controller.Key]
}

// tuning is what a pair of kinds decides about its queues and its status writes. Each pair
// decides it explicitly where it is built (New, newGroups).
type tuning struct {
	// urgentFirst makes the snapshot queue take the snapshots whose next sync likely finishes
	// them (nearlyDone) before the others.
	urgentFirst bool
	// pacedStart queues each settled snapshot and content of the informers' first list by
	// itself, paced, the others at once (controller.FirstList), and nothing for the classes then:
	// every object is queued by its own first list anyway, and after a restart with thousands of
	// objects this keeps the backlog a new or unfinished object waits behind short. Without it the
	// first list is handled as any change.
	pacedStart bool
	// statusGrace is how long a new content's status waits for the sidecar's first report.
	statusGrace time.Duration
}

// pair is what a reconciler of one pair of kinds is built from.
type pair[S kube.Object[S], C kube.Object[C]] struct {
	kind kind[S, C]
	// snapshots and contents write the two kinds.
	snapshots *kube.Writer[S]
	contents  *kube.Writer[C]
	// The informers of the snapshots, the contents and the classes.
	snapshotInformer, contentInformer, classInformer cache.SharedIndexInformer
	tuning
}

// newReconciler builds the reconciler of p with the controller's settings and adds its handlers
// to p's informers; it returns their HasSynced.
func newReconciler[S kube.Object[S], C kube.Object[C]](c *Controller, p pair[S, C]) (*reconciler[S, C], []cache.InformerSynced, error) {
	keys := p.kind.keys()
	r := &reconciler[S, C]{kind: p.kind, keys: keys, snapshots: p.snapshots, contents: p.contents,
		snapshotLister: listers.New[S](p.snapshotInformer.GetIndexer(), keys.snapshotResource),
		contentLister:  listers.New[C](p.contentInformer.GetIndexer(), keys.contentResource),
		recorder:       c.recorder, clock: c.clock, readyEvents: c.opts.ReadyEvents, statusGrace: p.statusGrace}
	if p.urgentFirst {
		r.snapshotQueue = controller.NewUrgentFirstQueue(keys.snapshotQueue, c.opts.Retry, r.syncSnapshotKey, r.nearlyDone)
	} else {
		r.snapshotQueue = controller.NewQueue(keys.snapshotQueue, c.opts.Retry, r.syncSnapshotKey)
	}
	r.contentQueue = controller.NewQueue(keys.contentQueue, c.opts.Retry, r.syncContentKey)

	onClass := func(metav1.Object) { r.requeueUnbound() }
	// What the informers' first list does with each object.
	firstSnapshot, firstContent, firstClass := r.onSnapshot, r.onContent, onClass
	if p.pacedStart {
		firstSnapshot = controller.FirstList(r.snapshotQueue, r.settledSnapshot, r.onSnapshot)
		firstContent = controller.FirstList(r.contentQueue, r.settledContent, r.onContent)
		firstClass = func(metav1.Object) {}
	}
	var synced []cache.InformerSynced
	for _, h := range []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{p.snapshotInformer, controller.HandlerWithInitialList(p.snapshots.Cache(), r.onSnapshot, firstSnapshot)},
		{p.contentInformer, controller.HandlerWithInitialList(p.contents.Cache(), r.onContent, firstContent)},
		{p.classInformer, controller.HandlerWithInitialList(nil, onClass, firstClass)},
	} {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return nil, nil, fmt.Errorf("add event handler: %w", err)
		}
		synced = append(synced, h.informer.HasSynced)
	}
	return r, synced, nil
}

// settledSnapshot tells whether a snapshot of the first list is likely to need nothing: ready,
// bound and not being deleted (controller.FirstList).
func (r *reconciler[S, C]) settledSnapshot(s S) bool {
	state := r.kind.state(s)
	return s.GetDeletionTimestamp() == nil && state.ready && state.content != ""
}

// settledContent is settledSnapshot for a content: reported on by the sidecar and not being
// deleted.
func (r *reconciler[S, C]) settledContent(c C) bool {
	return c.GetDeletionTimestamp() == nil && r.kind.info(c).reported
}

// onSnapshot queues a changed snapshot and the content it names, and tells the kind.
func (r *reconciler[S, C]) onSnapshot(s S) {
	r.snapshotQueue.Add(controller.KeyOf(s))
	if name := r.contentName(s); name != "" {
		r.contentQueue.Add(controller.Key{Name: name})
	}
	r.kind.changed(s)
}

// nearlyDone tells whether a snapshot's next sync is likely to finish it: it is not ready yet and
// the sidecar has reported on its content. Such keys are taken before new snapshots, so that in a
// burst each snapshot is done soon after its backend snapshot is, instead of after every other
// snapshot's first steps. A content without a report is not urgent: looking at it early would
// only write a not-ready status that the report then replaces.
func (r *reconciler[S, C]) nearlyDone(key controller.Key) bool {
	s, err := r.cachedSnapshot(key.Namespace, key.Name)
	if err != nil || s.GetDeletionTimestamp() != nil || r.kind.state(s).ready {
		return false
	}
	c, found, err := r.contentOf(s)
	return err == nil && found && r.kind.info(c).reported
}

// onContent queues a changed content and the snapshot it points at.
func (r *reconciler[S, C]) onContent(c C) {
	r.contentQueue.Add(controller.KeyOf(c))
	if ref := r.kind.ref(c); ref.Name != "" {
		r.snapshotQueue.Add(controller.Key{Namespace: ref.Namespace, Name: ref.Name})
	}
}

// requeueUnbound queues the snapshots not bound yet: a new default class may unblock them.
func (r *reconciler[S, C]) requeueUnbound() {
	all, err := r.snapshotLister.List(everything)
	if err != nil {
		return
	}
	for _, s := range all {
		if r.kind.state(s).content == "" {
			r.snapshotQueue.Add(controller.KeyOf(s))
		}
	}
}

// run runs both queues and their resync until ctx is done and their syncs have finished.
func (r *reconciler[S, C]) run(ctx context.Context, workers int, resync time.Duration) {
	go controller.Resync(ctx, r.snapshotQueue, resync, func() []controller.Key { return keys(r.snapshotLister.List) })
	go controller.Resync(ctx, r.contentQueue, resync, func() []controller.Key { return keys(r.contentLister.List) })
	done := make(chan struct{})
	go func() {
		r.contentQueue.Run(ctx, workers)
		close(done)
	}()
	r.snapshotQueue.Run(ctx, workers)
	<-done
}

// cachedSnapshot reads a snapshot from the informer's cache.
func (r *reconciler[S, C]) cachedSnapshot(namespace, name string) (S, error) {
	return listers.NewNamespaced(r.snapshotLister, namespace).Get(name)
}

func (r *reconciler[S, C]) syncSnapshotKey(ctx context.Context, key controller.Key) error {
	s, err := r.cachedSnapshot(key.Namespace, key.Name)
	if err != nil {
		return ignoreNotFound(err)
	}
	s = r.snapshots.Cache().Latest(s)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues(r.keys.snapshotQueue, klog.KObj(s)))
	return r.syncSnapshot(ctx, s)
}

func (r *reconciler[S, C]) syncContentKey(ctx context.Context, key controller.Key) error {
	c, err := r.contentLister.Get(key.Name)
	if err != nil {
		return ignoreNotFound(err)
	}
	c = r.contents.Cache().Latest(c)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues(r.keys.contentQueue, klog.KObj(c)))
	return r.syncContent(ctx, c)
}

// syncSnapshot is the state machine of the snapshot side:
//
//	deleting                     -> finalize (kind's holds, then the content to the sidecar)
//	content exists               -> syncBound (bind, finalizers, kind's steps, status)
//	content made by someone else -> wait (a group member, made by its group)
//	names a content that is gone -> fail
//	dynamic, no content yet      -> provision (checks, finalizers, create the content)
func (r *reconciler[S, C]) syncSnapshot(ctx context.Context, s S) error {
	if s.GetDeletionTimestamp() != nil {
		return r.finalize(ctx, s)
	}
	c, found, err := r.contentOf(s)
	switch {
	case err != nil:
		return err
	case found:
		return r.syncBound(ctx, s, c)
	case r.kind.waitsForContent(s):
		return nil
	case r.kind.state(s).content != "" || r.kind.sourceContent(s) != "":
		return r.fail(ctx, s, r.keys.reasonContentMissing, fmtMissing(r.keys.contentKind, r.contentName(s)))
	default:
		return r.provision(ctx, s)
	}
}

// contentName is the content s is bound to or will be: the one its status or source names, or
// for a dynamic snapshot the one named after its uid.
func (r *reconciler[S, C]) contentName(s S) string {
	if name := r.kind.state(s).content; name != "" {
		return name
	}
	if name := r.kind.sourceContent(s); name != "" {
		return name
	}
	return r.keys.defaultContent(s.GetUID())
}

// contentOf returns s's content; found is false when it does not exist.
func (r *reconciler[S, C]) contentOf(s S) (c C, found bool, err error) {
	return lookup(r.contentLister, r.contents, controller.Key{Name: r.contentName(s)})
}

// lookup returns the newest copy of the object at key: the lister's, made current by w's own
// writes, or, when this controller created it and the informer has not delivered it yet, w's
// own; found is false when neither has it (controller.Writes.Lookup).
func lookup[T kube.Object[T]](lister listers.ResourceIndexer[T], w *kube.Writer[T], key controller.Key) (T, bool, error) {
	return w.Cache().Lookup(key, func(key controller.Key) (T, error) {
		return listers.NewNamespaced(lister, key.Namespace).Get(key.Name)
	})
}

// driverOf is the driver of s's content, or of its class before the content exists.
func (r *reconciler[S, C]) driverOf(s S) string {
	if c, err := r.contentLister.Get(r.contentName(s)); err == nil {
		return r.kind.info(c).driver
	}
	return r.kind.classDriver(s)
}

// refersTo tells whether c's reference names s.
func (r *reconciler[S, C]) refersTo(c C, s S) bool {
	ref := r.kind.ref(c)
	return ref.Namespace == s.GetNamespace() && ref.Name == s.GetName() && (ref.UID == "" || ref.UID == s.GetUID())
}
