package schedule

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	grouplisters "github.com/shutter-csi/shutter/client/listers/volumegroupsnapshot/v1"
	snapshotlisters "github.com/shutter-csi/shutter/client/listers/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/kube"
)

// kind is what a schedule takes each run: a VolumeSnapshot per claim, or one
// VolumeGroupSnapshot of all claims. The reconciler is written once against it.
type kind interface {
	// list returns the schedule's snapshots that are not being deleted.
	list(s *schedulev1alpha1.SnapshotSchedule) ([]Item, error)
	// create takes the run at t of the selected claims and returns what it made (or found). An
	// object of that name that the schedule owns already is the run taken before (a restart or
	// another replica).
	create(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, claims []*corev1.PersistentVolumeClaim, t time.Time) ([]Item, error)
	// delete removes one of the schedule's snapshots, if it is still the one listed.
	// delete reports whether this call deleted it: false, without an error, when it was gone
	// already (a lister that has not seen an earlier prune yet) or is another object now.
	delete(ctx context.Context, namespace string, it Item) (bool, error)
}

// volumeSnapshots is the kind of schedules with group: false.
type volumeSnapshots struct {
	client clientset.Interface
	lister snapshotlisters.VolumeSnapshotLister
	writer *kube.Writer[*snapshotv1.VolumeSnapshot]
}

func (k volumeSnapshots) list(s *schedulev1alpha1.SnapshotSchedule) ([]Item, error) {
	vss, err := k.lister.VolumeSnapshots(s.Namespace).List(scheduleSelector(s))
	return owned(s, vss, err, func(vs *snapshotv1.VolumeSnapshot) (Item, bool) {
		if vs.Spec.Source.PersistentVolumeClaimName == nil {
			return Item{}, false
		}
		return item(vs, *vs.Spec.Source.PersistentVolumeClaimName, snapshotState(vs.Status)), true
	})
}

// owned turns the objects the schedule owns and that are not being deleted into items; toItem
// leaves one out by returning false. err is the listing's.
func owned[T metav1.Object](s *schedulev1alpha1.SnapshotSchedule, objs []T, err error, toItem func(T) (Item, bool)) ([]Item, error) {
	if err != nil {
		return nil, err
	}
	var items []Item
	for _, obj := range objs {
		if obj.GetDeletionTimestamp() != nil || !ownedBy(obj, s) {
			continue
		}
		if it, ok := toItem(obj); ok {
			items = append(items, it)
		}
	}
	return items, nil
}

func snapshotState(st *snapshotv1.VolumeSnapshotStatus) State {
	switch {
	case st == nil:
		return Pending
	case st.ReadyToUse != nil && *st.ReadyToUse:
		return Ready
	case st.Error != nil:
		return Failed
	}
	return Pending
}

func (k volumeSnapshots) create(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, claims []*corev1.PersistentVolumeClaim, t time.Time) ([]Item, error) {
	var made []Item
	for _, pvc := range claims {
		vs := &snapshotv1.VolumeSnapshot{
			ObjectMeta: objectMeta(s, SnapshotName(s.Name, pvc.Name, t), t),
			Spec: snapshotv1.VolumeSnapshotSpec{
				Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &pvc.Name},
			},
		}
		if tpl := s.Spec.SnapshotTemplate; tpl != nil {
			vs.Spec.VolumeSnapshotClassName = tpl.VolumeSnapshotClassName
		}
		if err := createRun(ctx, s, k.writer, k.client.SnapshotV1().VolumeSnapshots(s.Namespace), vs); err != nil {
			return made, err
		}
		made = append(made, Item{Name: vs.Name, Series: pvc.Name, Time: t, State: Pending})
	}
	return made, nil
}

func (k volumeSnapshots) delete(ctx context.Context, namespace string, it Item) (bool, error) {
	return deleted(k.writer.Delete(ctx, &snapshotv1.VolumeSnapshot{ObjectMeta: it.meta(namespace)}))
}

// volumeGroupSnapshots is the kind of schedules with group: true.
type volumeGroupSnapshots struct {
	client clientset.Interface
	lister grouplisters.VolumeGroupSnapshotLister
	writer *kube.Writer[*groupv1.VolumeGroupSnapshot]
}

func (k volumeGroupSnapshots) list(s *schedulev1alpha1.SnapshotSchedule) ([]Item, error) {
	vgss, err := k.lister.VolumeGroupSnapshots(s.Namespace).List(scheduleSelector(s))
	return owned(s, vgss, err, func(vgs *groupv1.VolumeGroupSnapshot) (Item, bool) {
		state := Pending
		if st := vgs.Status; st != nil {
			state = snapshotState(&snapshotv1.VolumeSnapshotStatus{ReadyToUse: st.ReadyToUse, Error: st.Error})
		}
		return item(vgs, "", state), true
	})
}

func (k volumeGroupSnapshots) create(ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, _ []*corev1.PersistentVolumeClaim, t time.Time) ([]Item, error) {
	vgs := &groupv1.VolumeGroupSnapshot{
		ObjectMeta: objectMeta(s, SnapshotName(s.Name, "", t), t),
		Spec: groupv1.VolumeGroupSnapshotSpec{
			Source: groupv1.VolumeGroupSnapshotSource{Selector: s.Spec.ClaimSelector.DeepCopy()},
		},
	}
	if tpl := s.Spec.SnapshotTemplate; tpl != nil {
		vgs.Spec.VolumeGroupSnapshotClassName = tpl.VolumeGroupSnapshotClassName
	}
	if err := createRun(ctx, s, k.writer, k.client.GroupsnapshotV1().VolumeGroupSnapshots(s.Namespace), vgs); err != nil {
		return nil, err
	}
	return []Item{{Name: vgs.Name, Time: t, State: Pending}}, nil
}

func (k volumeGroupSnapshots) delete(ctx context.Context, namespace string, it Item) (bool, error) {
	return deleted(k.writer.Delete(ctx, &groupv1.VolumeGroupSnapshot{ObjectMeta: it.meta(namespace)}))
}

// objectMeta is the metadata of a snapshot a schedule takes for the run at t: the template's
// labels and annotations, the schedule label, the run's time and the owner reference.
func objectMeta(s *schedulev1alpha1.SnapshotSchedule, name string, t time.Time) metav1.ObjectMeta {
	meta := metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: map[string]string{}, Annotations: map[string]string{}}
	if tpl := s.Spec.SnapshotTemplate; tpl != nil {
		for k, v := range tpl.Labels {
			meta.Labels[k] = v
		}
		for k, v := range tpl.Annotations {
			meta.Annotations[k] = v
		}
	}
	meta.Labels[schedulev1alpha1.LabelSchedule] = s.Name
	meta.Annotations[schedulev1alpha1.AnnotationScheduledTime] = t.UTC().Format(time.RFC3339)
	meta.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: schedulev1alpha1.SchemeGroupVersion.String(), Kind: "SnapshotSchedule",
		Name: s.Name, UID: s.UID, Controller: ptrTo(true),
	}}
	return meta
}

// getter is the part of a generated typed client that reads one object.
type getter[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
}

// createRun creates obj, a snapshot that the run takes, through w. An object of that name that
// is this schedule's (read through client) is the run taken before; one of another owner is a
// name clash the user must resolve.
func createRun[T kube.Object[T]](ctx context.Context, s *schedulev1alpha1.SnapshotSchedule, w *kube.Writer[T], client getter[T], obj T) error {
	_, err := w.Create(ctx, obj)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	found, err := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read %s: %w", obj.GetName(), err)
	}
	if !ownedBy(found, s) {
		return fmt.Errorf("%w: %s exists and does not belong to this schedule", errNameTaken, obj.GetName())
	}
	return nil
}

// withMade adds to the listed items those just made that the informer does not show yet.
func withMade(items, made []Item) []Item {
	listed := map[string]bool{}
	for _, it := range items {
		listed[it.Name] = true
	}
	for _, it := range made {
		if !listed[it.Name] {
			items = append(items, it)
		}
	}
	return items
}

// item turns a snapshot into what retention sees.
func item(obj metav1.Object, series string, state State) Item {
	at := obj.GetCreationTimestamp().Time
	if v, ok := obj.GetAnnotations()[schedulev1alpha1.AnnotationScheduledTime]; ok {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			at = t
		}
	}
	return Item{Name: obj.GetName(), UID: obj.GetUID(), Series: series, Time: at, State: state,
		Keep: obj.GetLabels()[schedulev1alpha1.LabelKeep] == "true"}
}

func scheduleSelector(s *schedulev1alpha1.SnapshotSchedule) labels.Selector {
	return labels.SelectorFromSet(labels.Set{schedulev1alpha1.LabelSchedule: s.Name})
}

// ownedBy tells whether obj carries the schedule's owner reference (label and name alone could
// be copied by anyone).
func ownedBy(obj metav1.Object, s *schedulev1alpha1.SnapshotSchedule) bool {
	if obj.GetLabels()[schedulev1alpha1.LabelSchedule] != s.Name {
		return false
	}
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

func ptrTo[T any](v T) *T { return &v }

func everything() labels.Selector { return labels.Everything() }
