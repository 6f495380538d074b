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
	sel, err := k.selectVolumes(vgs)
	if err != nil {
		return p, err
	}
	class, err := k.groupClass(vgs, sel.driver)
	if err != nil {
		return p, err
	}
	meta, err := contentMeta(groupKeys, vgs, class.Name, class.Parameters)
	if err != nil {
		return p, err
	}
	content := &groupv1.VolumeGroupSnapshotContent{ObjectMeta: meta, Spec: groupv1.VolumeGroupSnapshotContentSpec{
		VolumeGroupSnapshotRef: snapshotRef(groupKeys, vgs),
		DeletionPolicy:         class.DeletionPolicy, Driver: sel.driver, VolumeGroupSnapshotClassName: ptr.To(class.Name),
		Source: groupv1.VolumeGroupSnapshotContentSource{VolumeHandles: sel.handles},
	}}
	if sel.node != "" {
		content.Labels = map[string]string{protocol.LabelManagedBy: sel.node}
	}
	return plan[*groupv1.VolumeGroupSnapshotContent]{content: content, policy: class.DeletionPolicy, class: class.Name}, nil
}

// selection is what a group's selector picked: the claims' driver, their sorted volume handles
// and, with distributed snapshotting, the one node all the volumes sit on.
type selection struct {
	driver  string
	handles []string
	node    string
}

// selectVolumes returns the volumes of the claims the selector picks: at least one, every one
// bound, CSI, and of one driver; with distributed snapshotting, all on one node, since only that
// node's sidecar and driver can take the group (one CSI call cuts every member).
func (k *groupKind) selectVolumes(vgs *groupv1.VolumeGroupSnapshot) (selection, error) {
	var sel selection
	selector, err := metav1.LabelSelectorAsSelector(vgs.Spec.Source.Selector)
	if err != nil {
		return sel, fmt.Errorf("invalid selector: %w", err)
	}
	claims, err := k.claims.PersistentVolumeClaims(vgs.Namespace).List(selector)
	if err != nil {
		return sel, err
	}
	if len(claims) == 0 {
		return sel, fmt.Errorf("the selector %s matches no PersistentVolumeClaim in namespace %s", selector, vgs.Namespace)
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].Name < claims[j].Name })
	for _, pvc := range claims {
		pv, err := k.claimVolume(pvc)
		if err != nil {
			return sel, err
		}
		if sel.driver != "" && pv.Spec.CSI.Driver != sel.driver {
			return sel, fmt.Errorf("the selected claims belong to more than one driver (%s, %s)", sel.driver, pv.Spec.CSI.Driver)
		}
		sel.driver = pv.Spec.CSI.Driver
		sel.handles = append(sel.handles, pv.Spec.CSI.VolumeHandle)
		if err := k.sameNode(&sel, pvc, pv); err != nil {
			return sel, err
		}
	}
	sort.Strings(sel.handles)
	return sel, nil
}

// claimVolume is the bound CSI volume of pvc.
func (k *groupKind) claimVolume(pvc *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, error) {
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil, fmt.Errorf("PersistentVolumeClaim %s is not bound yet", pvc.Name)
	}
	pv, err := k.volumes.Get(pvc.Spec.VolumeName)
	if err != nil {
		return nil, fmt.Errorf("PersistentVolume %s of claim %s: %w", pvc.Spec.VolumeName, pvc.Name, err)
	}
	if pv.Spec.CSI == nil {
		return nil, fmt.Errorf("PersistentVolume %s of claim %s is not a CSI volume", pv.Name, pvc.Name)
	}
	return pv, nil
}

// sameNode records in sel the node of pv (distributed snapshotting only) and fails when an
// earlier claim's volume sits on another node.
func (k *groupKind) sameNode(sel *selection, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	if !k.distributed {
		return nil
	}
	node, err := volumeNode(pv)
	if err != nil {
		return fmt.Errorf("claim %s: %w", pvc.Name, err)
	}
	if sel.node != "" && node != sel.node {
		return fmt.Errorf("the selected claims sit on more than one node (%s, %s of claim %s): with distributed snapshotting one node's driver takes a group snapshot, so all its volumes must be on that node", sel.node, node, pvc.Name)
	}
	sel.node = node
	return nil
}

// groupClass returns the class the group names, or the one default group class of driver.
func (k *groupKind) groupClass(vgs *groupv1.VolumeGroupSnapshot, driver string) (*groupv1.VolumeGroupSnapshotClass, error) {
	return classPicker[*groupv1.VolumeGroupSnapshotClass]{
		kind: "VolumeGroupSnapshotClass", upstream: "group snapshot class", get: k.classes.Get, indexer: k.classIndexer, defaultAnn: protocol.AnnGroupDefaultClass,
		driverOf: func(class *groupv1.VolumeGroupSnapshotClass) string { return class.Driver },
	}.pick(vgs.Spec.VolumeGroupSnapshotClassName, driver)
}
