package snapshot

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// plan checks a dynamic snapshot's source claim and class and builds its content; the claim is
// protected with a finalizer after the snapshot got its own.
func (k *snapshotKind) plan(_ context.Context, vs *snapshotv1.VolumeSnapshot) (plan[*snapshotv1.VolumeSnapshotContent], error) {
	var p plan[*snapshotv1.VolumeSnapshotContent]
	pvc, pv, err := k.sourceVolume(vs)
	if err != nil {
		return p, &inputError{ReasonInvalidSource, err}
	}
	class, err := k.snapshotClass(vs, pv.Spec.CSI.Driver)
	if err != nil {
		return p, &inputError{ReasonInvalidClass, err}
	}
	content, err := k.newContent(vs, pvc, pv, class)
	if err != nil {
		return p, &inputError{ReasonInvalidSecret, err}
	}
	return plan[*snapshotv1.VolumeSnapshotContent]{content: content, policy: class.DeletionPolicy, class: class.Name,
		prepare: func(ctx context.Context) error { return k.protectClaim(ctx, pvc) }}, nil
}

// sourceVolume returns the snapshot's source claim and its volume, which must be bound and CSI.
func (k *snapshotKind) sourceVolume(vs *snapshotv1.VolumeSnapshot) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, error) {
	name := *vs.Spec.Source.PersistentVolumeClaimName
	pvc, err := k.claims.PersistentVolumeClaims(vs.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil, fmt.Errorf("source PersistentVolumeClaim %s does not exist", name)
	} else if err != nil {
		return nil, nil, err
	}
	pvc = k.claimWriter.Cache().Latest(pvc)
	if pvc.DeletionTimestamp != nil && !kube.HasFinalizer(pvc, protocol.PVCAsSourceFinalizer) {
		return nil, nil, fmt.Errorf("source PersistentVolumeClaim %s is being deleted", name)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil, nil, fmt.Errorf("source PersistentVolumeClaim %s is not bound yet", name)
	}
	pv, err := k.volumes.Get(pvc.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return nil, nil, fmt.Errorf("PersistentVolume %s of claim %s does not exist", pvc.Spec.VolumeName, name)
	} else if err != nil {
		return nil, nil, err
	}
	if pv.Spec.CSI == nil {
		return nil, nil, fmt.Errorf("PersistentVolume %s of claim %s is not a CSI volume and cannot be snapshotted", pv.Name, name)
	}
	return pvc, pv, nil
}

// snapshotClass returns the class the snapshot names, or the one default class of driver.
func (k *snapshotKind) snapshotClass(vs *snapshotv1.VolumeSnapshot, driver string) (*snapshotv1.VolumeSnapshotClass, error) {
	return classPicker[*snapshotv1.VolumeSnapshotClass]{
		kind: "VolumeSnapshotClass", upstream: "snapshot class", get: k.classes.Get, indexer: k.classIndexer, defaultAnn: protocol.AnnDefaultClass,
		driverOf: func(class *snapshotv1.VolumeSnapshotClass) string { return class.Driver },
	}.pick(vs.Spec.VolumeSnapshotClassName, driver)
}

// classPicker finds the class of a new snapshot or group snapshot: the one it names, which must be
// of the volumes' driver, or the single class of that driver marked default.
type classPicker[T metav1.Object] struct {
	kind string
	// upstream is how upstream's controller names the kind in its errors ("snapshot class"),
	// whose wording tools and Kubernetes' e2e tests look for.
	upstream   string
	get        func(name string) (T, error)
	indexer    cache.Indexer // by driver
	driverOf   func(T) string
	defaultAnn string
}

func (p classPicker[T]) pick(name *string, driver string) (T, error) {
	var zero T
	if name != nil {
		class, err := p.get(*name)
		if apierrors.IsNotFound(err) {
			return zero, fmt.Errorf("%s %s does not exist", p.kind, *name)
		} else if err != nil {
			return zero, err
		}
		if d := p.driverOf(class); d != driver {
			return zero, fmt.Errorf("%s %s is for driver %s, but the volumes are of driver %s", p.kind, *name, d, driver)
		}
		return class, nil
	}
	var defaults []T
	for _, class := range indexed[T](p.indexer, byDriver, driver) {
		if class.GetAnnotations()[p.defaultAnn] == "true" {
			defaults = append(defaults, class)
		}
	}
	switch len(defaults) {
	case 1:
		return defaults[0], nil
	case 0:
		return zero, fmt.Errorf("cannot find default %s: no %s is named and driver %s has no default class", p.upstream, p.kind, driver)
	default:
		// Upstream says "snapshot classes" for groups too.
		return zero, fmt.Errorf("%d default snapshot classes were found: driver %s has %d default %ses; mark exactly one with %s",
			len(defaults), driver, len(defaults), p.kind, p.defaultAnn)
	}
}

// newContent builds the dynamic content of vs.
func (k *snapshotKind) newContent(vs *snapshotv1.VolumeSnapshot, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume,
	class *snapshotv1.VolumeSnapshotClass) (*snapshotv1.VolumeSnapshotContent, error) {
	meta, err := contentMeta(singleKeys, vs, class.Name, class.Parameters)
	if err != nil {
		return nil, err
	}
	content := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: meta,
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef:       snapshotRef(singleKeys, vs),
			DeletionPolicy:          class.DeletionPolicy,
			Driver:                  class.Driver,
			VolumeSnapshotClassName: ptr.To(class.Name),
			Source:                  snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To(pv.Spec.CSI.VolumeHandle)},
		},
	}
	if k.preventVolumeModeConversion {
		mode := corev1.PersistentVolumeFilesystem
		if pvc.Spec.VolumeMode != nil {
			mode = *pvc.Spec.VolumeMode
		}
		content.Spec.SourceVolumeMode = &mode
	}
	if k.distributedSnapshotting {
		node, err := volumeNode(pv)
		if err != nil {
			return nil, err
		}
		content.Labels = map[string]string{protocol.LabelManagedBy: node}
	}
	return content, nil
}

// contentMeta is the metadata of the dynamic content of s: its name, its finalizer, and the
// annotations naming the deletion secret that the parameters of s's class name.
func contentMeta(keys kindKeys, s metav1.Object, class string, params map[string]string) (metav1.ObjectMeta, error) {
	meta := metav1.ObjectMeta{Name: keys.defaultContent(s.GetUID()), Finalizers: []string{keys.contentFinalizer}}
	secret, err := protocol.ResolveSecret(params, keys.secret, protocol.TemplateValues{
		ContentName: meta.Name, SnapshotName: s.GetName(), SnapshotNamespace: s.GetNamespace(),
	})
	if err != nil {
		return meta, fmt.Errorf("%s %s: %w", keys.classKind, class, err)
	}
	if secret != nil {
		meta.Annotations = map[string]string{keys.secretName: secret.Name, keys.secretNamespace: secret.Namespace}
	}
	return meta, nil
}

// snapshotRef is a content's reference to its snapshot s.
func snapshotRef(keys kindKeys, s metav1.Object) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: keys.apiVersion, Kind: keys.snapshotKind, Namespace: s.GetNamespace(), Name: s.GetName(), UID: s.GetUID()}
}

// volumeNode is the one node a local volume's node affinity allows.
func volumeNode(pv *corev1.PersistentVolume) (string, error) {
	if pv.Spec.NodeAffinity != nil && pv.Spec.NodeAffinity.Required != nil {
		for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
			for _, expr := range term.MatchExpressions {
				if expr.Operator == corev1.NodeSelectorOpIn && len(expr.Values) == 1 {
					return expr.Values[0], nil
				}
			}
		}
	}
	return "", errors.New("distributed snapshotting needs the volume's node affinity to name one node")
}

// protectClaim adds the pvc-as-source finalizer while a snapshot of the claim is being taken.
func (k *snapshotKind) protectClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	_, err := k.claimWriter.PatchFinalizers(ctx, pvc, []string{protocol.PVCAsSourceFinalizer}, nil)
	return err
}

// releaseClaim drops the pvc-as-source finalizer of vs's source claim once no snapshot of that
// claim is still being taken.
func (k *snapshotKind) releaseClaim(ctx context.Context, vs *snapshotv1.VolumeSnapshot) error {
	name := vs.Spec.Source.PersistentVolumeClaimName
	if !claimDependent(vs) || beingTaken(vs) {
		return nil
	}
	pvc, err := k.claims.PersistentVolumeClaims(vs.Namespace).Get(*name)
	if err != nil {
		return ignoreNotFound(err)
	}
	pvc = k.claimWriter.Cache().Latest(pvc)
	if !kube.HasFinalizer(pvc, protocol.PVCAsSourceFinalizer) {
		return nil
	}
	for _, other := range indexed[*snapshotv1.VolumeSnapshot](k.snapshotIndexer, bySourcePVC, nsName(pvc.Namespace, pvc.Name)) {
		other = k.snapshotWrites.Latest(other)
		if other.UID != vs.UID && beingTaken(other) {
			return nil
		}
	}
	_, err = k.claimWriter.PatchFinalizers(ctx, pvc, nil, []string{protocol.PVCAsSourceFinalizer})
	return err
}

// beingTaken tells whether the backend may still be cutting the snapshot from its claim.
func beingTaken(vs *snapshotv1.VolumeSnapshot) bool {
	return vs.DeletionTimestamp == nil && !protocol.Ready(vs) && (vs.Status == nil || vs.Status.Error == nil)
}
