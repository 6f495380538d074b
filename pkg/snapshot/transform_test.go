package snapshot

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

func TestTrimForCache(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	meta := metav1.ObjectMeta{
		Name: "data", Namespace: "ns", UID: "u1", ResourceVersion: "7",
		Labels:        map[string]string{"app": "db"},
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}", "pv.kubernetes.io/bind-completed": "yes"},
		Finalizers:    []string{"kubernetes.io/pvc-protection"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: meta,
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1", VolumeMode: &block,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			DataSource:  &corev1.TypedLocalObjectReference{Kind: "VolumeSnapshot", Name: "s"}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
	got, _ := trimForCache(pvc)
	claim := got.(*corev1.PersistentVolumeClaim)
	if claim.Name != "data" || claim.Namespace != "ns" || claim.UID != "u1" || claim.ResourceVersion != "7" ||
		claim.Labels["app"] != "db" || len(claim.Finalizers) != 1 || claim.Spec.VolumeName != "pv1" ||
		claim.Spec.VolumeMode == nil || claim.Spec.DataSource == nil || claim.Status.Phase != corev1.ClaimBound {
		t.Errorf("claim lost a field the controller reads: %+v", claim)
	}
	if claim.Annotations != nil || claim.Spec.AccessModes != nil || claim.Status.Capacity != nil || claim.ManagedFields != nil {
		t.Errorf("claim kept fields nobody reads: %+v", claim)
	}

	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1", UID: "u2", Annotations: map[string]string{"a": "b"}},
		Spec: corev1.PersistentVolumeSpec{VolumeMode: &block, NodeAffinity: &corev1.VolumeNodeAffinity{},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "ns", Name: "data", UID: "u1", ResourceVersion: "7"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "d", VolumeHandle: "h", VolumeAttributes: map[string]string{"k": "v"}}}}}
	got, _ = trimForCache(pv)
	vol := got.(*corev1.PersistentVolume)
	if vol.Spec.CSI == nil || vol.Spec.CSI.Driver != "d" || vol.Spec.CSI.VolumeHandle != "h" || vol.Spec.VolumeMode == nil ||
		vol.Spec.NodeAffinity == nil || vol.Spec.CSI.VolumeAttributes != nil || vol.Annotations != nil ||
		*vol.Spec.ClaimRef != (corev1.ObjectReference{Namespace: "ns", Name: "data"}) {
		t.Errorf("volume %+v", vol)
	}

	vs := &snapshotv1.VolumeSnapshot{ObjectMeta: *meta.DeepCopy()}
	got, _ = trimForCache(vs)
	snap := got.(*snapshotv1.VolumeSnapshot)
	if snap.ManagedFields != nil || snap.Annotations["kubectl.kubernetes.io/last-applied-configuration"] != "" || snap.Annotations["pv.kubernetes.io/bind-completed"] != "yes" {
		t.Errorf("snapshot metadata %+v", snap.ObjectMeta)
	}
}
