package schedule

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	grouplisters "github.com/shutter-csi/shutter/client/listers/volumegroupsnapshot/v1"
	snapshotlisters "github.com/shutter-csi/shutter/client/listers/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// kind is what a schedule takes each run: a VolumeSnapshot per claim, or one
// VolumeGroupSnapshot of all claims. The reconciler is written once against it.
type kind interface {
	// resolve finds the schedule's recorded snapshots: the items of those that exist, and the
	// names of the records whose object is gone, is being deleted, or is another object now.
	resolve(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, recs []schedulev1alpha1.ScheduledSnapshot) (items []Item, gone []string)
	// create takes the run at t of claim ("" for the group snapshot). When the run's name holds
	// an object whose uid is not recorded, the run is taken under a name the API server
	// generates, and squatted is the name found taken.
	create(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, claim string, t time.Time, recorded func(types.UID) bool) (it Item, squatted string, err error)
	// delete removes one of the schedule's snapshots, if it is still the one recorded. It
	// reports whether this call deleted it: false, without an error, when it was gone already
	// or is another object now.
	delete(ctx context.Context, namespace string, it Item) (bool, error)
	// own gives the item's object the schedule's owner reference (on) or takes it away.
	own(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, it Item, on bool) error
	// name is the kind's name in events.
	name() string
}

// runKind is kind for snapshots of type T.
type runKind[T kube.Object[T]] struct {
	kindName string
	// get reads the informer's copy; read asks the API server.
	get    func(namespace, name string) (T, error)
	read   func(ctx context.Context, namespace, name string) (T, error)
	writer *kube.Writer[T]
	// blank returns an empty object; build one with the spec a run of claim takes.
	blank func() T
	build func(s *schedulev1alpha1.SnapshotSchedule, claim string) T
	// describe returns what retention needs of an object: its series and state.
	describe func(T) (series string, state State)
}

func newVolumeSnapshots(client clientset.Interface, lister snapshotlisters.VolumeSnapshotLister, w *kube.Writer[*snapshotv1.VolumeSnapshot]) kind {
	return &runKind[*snapshotv1.VolumeSnapshot]{
		kindName: "VolumeSnapshot", writer: w,
		get: func(ns, name string) (*snapshotv1.VolumeSnapshot, error) { return lister.VolumeSnapshots(ns).Get(name) },
		read: func(ctx context.Context, ns, name string) (*snapshotv1.VolumeSnapshot, error) {
			return client.SnapshotV1().VolumeSnapshots(ns).Get(ctx, name, metav1.GetOptions{})
		},
		blank: func() *snapshotv1.VolumeSnapshot { return &snapshotv1.VolumeSnapshot{} },
		build: func(s *schedulev1alpha1.SnapshotSchedule, claim string) *snapshotv1.VolumeSnapshot {
			vs := &snapshotv1.VolumeSnapshot{Spec: snapshotv1.VolumeSnapshotSpec{
				Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &claim}}}
			if tpl := s.Spec.SnapshotTemplate; tpl != nil {
				vs.Spec.VolumeSnapshotClassName = tpl.VolumeSnapshotClassName
			}
			return vs
		},
		describe: func(vs *snapshotv1.VolumeSnapshot) (string, State) {
			return ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, ""), stateOf(protocol.Report(vs))
		},
	}
}

func newVolumeGroupSnapshots(client clientset.Interface, lister grouplisters.VolumeGroupSnapshotLister, w *kube.Writer[*groupv1.VolumeGroupSnapshot]) kind {
	return &runKind[*groupv1.VolumeGroupSnapshot]{
		kindName: "VolumeGroupSnapshot", writer: w,
		get: func(ns, name string) (*groupv1.VolumeGroupSnapshot, error) {
			return lister.VolumeGroupSnapshots(ns).Get(name)
		},
		read: func(ctx context.Context, ns, name string) (*groupv1.VolumeGroupSnapshot, error) {
			return client.GroupsnapshotV1().VolumeGroupSnapshots(ns).Get(ctx, name, metav1.GetOptions{})
		},
		blank: func() *groupv1.VolumeGroupSnapshot { return &groupv1.VolumeGroupSnapshot{} },
		build: func(s *schedulev1alpha1.SnapshotSchedule, _ string) *groupv1.VolumeGroupSnapshot {
			vgs := &groupv1.VolumeGroupSnapshot{Spec: groupv1.VolumeGroupSnapshotSpec{
				Source: groupv1.VolumeGroupSnapshotSource{Selector: s.Spec.ClaimSelector.DeepCopy()}}}
			if tpl := s.Spec.SnapshotTemplate; tpl != nil {
				vgs.Spec.VolumeGroupSnapshotClassName = tpl.VolumeGroupSnapshotClassName
			}
			return vgs
		},
		describe: func(vgs *groupv1.VolumeGroupSnapshot) (string, State) {
			return "", stateOf(protocol.Report(vgs))
		},
	}
}

// stateOf is the State of a snapshot whose status reports ready and err.
func stateOf(ready bool, err *snapshotv1.VolumeSnapshotError) State {
	switch {
	case ready:
		return Ready
	case err != nil:
		return Failed
	}
	return Pending
}

func (k *runKind[T]) name() string { return k.kindName }

// lookup returns the newest copy of an object: the lister's, or this reconciler's own write
// the informer has not delivered yet (a snapshot just created).
func (k *runKind[T]) lookup(namespace, name string) (T, bool) {
	obj, found, err := k.writer.Cache().Lookup(controller.Key{Namespace: namespace, Name: name}, func(key controller.Key) (T, error) {
		return k.get(key.Namespace, key.Name)
	})
	return obj, found && err == nil
}

// resolve reads a record the informer does not show from the API server before it calls it
// gone: the informer may lag behind the status that recorded it (another replica's create).
func (k *runKind[T]) resolve(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, recs []schedulev1alpha1.ScheduledSnapshot) ([]Item, []string) {
	var items []Item
	var gone []string
	for _, rec := range recs {
		obj, ok := k.lookup(s.Namespace, rec.Name)
		if !ok || obj.GetUID() != rec.UID {
			var err error
			if obj, err = k.read(ctx, s.Namespace, rec.Name); err != nil && !apierrors.IsNotFound(err) {
				// Cannot tell: keep the record, leave the snapshot out of this sync.
				continue
			}
			ok = err == nil
		}
		if !ok || obj.GetUID() != rec.UID || obj.GetDeletionTimestamp() != nil {
			gone = append(gone, rec.Name)
			continue
		}
		items = append(items, k.item(s, obj, rec.RunTime.Time))
	}
	return items, gone
}

func (k *runKind[T]) create(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, claim string, t time.Time,
	recorded func(types.UID) bool) (Item, string, error) {
	name := SnapshotName(s.Name, claim, t)
	obj := k.build(s, claim)
	setMeta(obj, s, name, t)
	made, err := k.writer.Create(ctx, obj)
	squatted := ""
	if apierrors.IsAlreadyExists(err) {
		if held, rerr := k.read(ctx, s.Namespace, name); rerr == nil && recorded(held.GetUID()) {
			return k.item(s, held, t), "", nil // taken before: a retry whose status write failed
		}
		// Not the schedule's: whoever created it may have chosen its content and time. The
		// run is taken all the same, under a name nobody can know in advance.
		squatted = name
		obj.SetName("")
		obj.SetGenerateName(name + "-")
		made, err = k.writer.Create(ctx, obj)
	}
	if err != nil {
		return Item{}, squatted, err
	}
	return k.item(s, made, t), squatted, nil
}

func (k *runKind[T]) delete(ctx context.Context, namespace string, it Item) (bool, error) {
	obj := k.blank()
	obj.SetNamespace(namespace)
	obj.SetName(it.Name)
	obj.SetUID(it.UID)
	return deleted(k.writer.Delete(ctx, obj))
}

func (k *runKind[T]) own(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, it Item, on bool) error {
	obj, ok := k.lookup(s.Namespace, it.Name)
	if !ok || obj.GetUID() != it.UID {
		return nil
	}
	upd := obj.DeepCopy()
	var refs []metav1.OwnerReference
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID != s.UID {
			refs = append(refs, ref)
		}
	}
	if on {
		refs = append(refs, ownerReference(s))
	}
	upd.SetOwnerReferences(refs)
	_, err := k.writer.Patch(ctx, obj, upd)
	return err
}

// item turns one of the schedule's snapshots, taken for the run at t, into what retention sees.
func (k *runKind[T]) item(s *schedulev1alpha1.SnapshotSchedule, obj T, t time.Time) Item {
	series, state := k.describe(obj)
	return Item{Name: obj.GetName(), UID: obj.GetUID(), Series: series, Time: t, State: state,
		Keep: obj.GetLabels()[schedulev1alpha1.LabelKeep] == "true", Owned: hasOwner(obj, s)}
}

// setMeta gives a snapshot the schedule takes for the run at t its name, the template's labels
// and annotations, the schedule label, the run's time and, when the schedule asks for it, the
// owner reference.
func setMeta(obj metav1.Object, s *schedulev1alpha1.SnapshotSchedule, name string, t time.Time) {
	lbls, ann := map[string]string{}, map[string]string{}
	if tpl := s.Spec.SnapshotTemplate; tpl != nil {
		for k, v := range tpl.Labels {
			lbls[k] = v
		}
		for k, v := range tpl.Annotations {
			ann[k] = v
		}
	}
	lbls[schedulev1alpha1.LabelSchedule] = s.Name
	ann[schedulev1alpha1.AnnotationScheduledTime] = t.UTC().Format(time.RFC3339)
	obj.SetName(name)
	obj.SetNamespace(s.Namespace)
	obj.SetLabels(lbls)
	obj.SetAnnotations(ann)
	if s.Spec.DeleteSnapshotsWithSchedule {
		obj.SetOwnerReferences([]metav1.OwnerReference{ownerReference(s)})
	}
}

func ownerReference(s *schedulev1alpha1.SnapshotSchedule) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: schedulev1alpha1.SchemeGroupVersion.String(), Kind: "SnapshotSchedule",
		Name: s.Name, UID: s.UID, Controller: ptr.To(true)}
}

// hasOwner tells whether obj carries the schedule's owner reference.
func hasOwner(obj metav1.Object, s *schedulev1alpha1.SnapshotSchedule) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == s.UID {
			return true
		}
	}
	return false
}

// deleted turns a DELETE's error into whether it deleted the object: NotFound (gone already)
// and Conflict (the name holds another object now) are no error and no deletion.
func deleted(err error) (bool, error) {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return false, nil
	}
	return err == nil, err
}

func everything() labels.Selector { return labels.Everything() }
