package snapshot

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// plan builds the group content; any bad input is reported as ReasonGroupInvalid.
func (k *groupKind) plan(_ context.Context, vgs *groupv1.VolumeGroupSnapshot) (plan[*groupv1.VolumeGroupSnapshotContent], error) {
	p, err := k.newPlan(vgs)
	if err != nil {
		return p, &inputError{ReasonGroupInvalid, err}
	}
	return p, nil
}

// newPlan selects the claims, picks the class, and builds the group content.
func (k *groupKind) newPlan(vgs *groupv1.VolumeGroupSnapshot) (plan[*groupv1.VolumeGroupSnapshotContent], error) {
	var p plan[*groupv1.VolumeGroupSnapshotContent]
	driver, handles, err := k.selectVolumes(vgs)
	if err != nil {
		return p, err
	}
	class, err := k.groupClass(vgs, driver)
	if err != nil {
		return p, err
	}
	meta, err := contentMeta(groupKeys, vgs, class.Name, class.Parameters)
	if err != nil {
		return p, err
	}
	content := &groupv1.VolumeGroupSnapshotContent{ObjectMeta: meta, Spec: groupv1.VolumeGroupSnapshotContentSpec{
		VolumeGroupSnapshotRef: snapshotRef(groupKeys, vgs),
		DeletionPolicy:         class.DeletionPolicy, Driver: driver, VolumeGroupSnapshotClassName: ptr.To(class.Name),
		Source: groupv1.VolumeGroupSnapshotContentSource{VolumeHandles: handles},
	}}
	return plan[*groupv1.VolumeGroupSnapshotContent]{content: content, policy: class.DeletionPolicy, class: class.Name}, nil
}

// selectVolumes returns the driver and sorted volume handles of the claims the selector picks:
// at least one, every one bound, CSI, and of one driver.
func (k *groupKind) selectVolumes(vgs *groupv1.VolumeGroupSnapshot) (string, []string, error) {
	selector, err := metav1.LabelSelectorAsSelector(vgs.Spec.Source.Selector)
	if err != nil {
		return "", nil, fmt.Errorf("invalid selector: %w", err)
	}
	claims, err := k.claims.PersistentVolumeClaims(vgs.Namespace).List(selector)
	if err != nil {
		return "", nil, err
	}
	if len(claims) == 0 {
		return "", nil, fmt.Errorf("the selector %s matches no PersistentVolumeClaim in namespace %s", selector, vgs.Namespace)
	}
	var driver string
	var handles []string
	for _, pvc := range claims {
		if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
			return "", nil, fmt.Errorf("PersistentVolumeClaim %s is not bound yet", pvc.Name)
		}
		pv, err := k.volumes.Get(pvc.Spec.VolumeName)
		if err != nil {
			return "", nil, fmt.Errorf("PersistentVolume %s of claim %s: %w", pvc.Spec.VolumeName, pvc.Name, err)
		}
		if pv.Spec.CSI == nil {
			return "", nil, fmt.Errorf("PersistentVolume %s of claim %s is not a CSI volume", pv.Name, pvc.Name)
		}
		if driver != "" && pv.Spec.CSI.Driver != driver {
			return "", nil, fmt.Errorf("the selected claims belong to more than one driver (%s, %s)", driver, pv.Spec.CSI.Driver)
		}
		driver = pv.Spec.CSI.Driver
		handles = append(handles, pv.Spec.CSI.VolumeHandle)
	}
	sort.Strings(handles)
	return driver, handles, nil
}

// groupClass returns the class the group names, or the one default group class of driver.
func (k *groupKind) groupClass(vgs *groupv1.VolumeGroupSnapshot, driver string) (*groupv1.VolumeGroupSnapshotClass, error) {
	return classPicker[*groupv1.VolumeGroupSnapshotClass]{
		kind: "VolumeGroupSnapshotClass", upstream: "group snapshot class", get: k.classes.Get, indexer: k.classIndexer, defaultAnn: protocol.AnnGroupDefaultClass,
		driverOf: func(class *groupv1.VolumeGroupSnapshotClass) string { return class.Driver },
	}.pick(vgs.Spec.VolumeGroupSnapshotClassName, driver)
}
