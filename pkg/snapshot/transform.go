package snapshot

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"

	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
	"github.com/shutter-csi/shutter/pkg/kube"
)

// The informer caches keep only what the reconcilers read. Claims and volumes are cached for
// the whole cluster, most of them never snapshotted, so they are cut down to a few fields;
// every object loses its managedFields and kubectl's last-applied copy, which no reconciler reads
// and which are most of a small object's memory.
//
// A cached claim is still the base of the controller's merge patches: a patch holds only the
// fields a transition changes (finalizers), so the fields dropped here never appear in one.

// InformerFactories returns the informer factories the controller needs, with the cache
// transforms applied. Snapshots and contents, the kinds that number in the tens of thousands,
// are listed in pages, each trimmed before the next is read (kube.PagedList).
func InformerFactories(clients Clients) (informers.SharedInformerFactory, snapinformers.SharedInformerFactory) {
	snaps := snapinformers.NewSharedInformerFactoryWithOptions(clients.Snapshots, 0, snapinformers.WithTransform(trimForCache))
	kube.PagedSnapshots(snaps, nil, trimForCache)
	kube.PagedContents(snaps, nil, trimForCache)
	return informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0, informers.WithTransform(trimForCache)), snaps
}

// trimForCache strips an object before it enters an informer cache.
func trimForCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.PersistentVolumeClaim:
		return trimClaim(o), nil
	case *corev1.PersistentVolume:
		return trimVolume(o), nil
	}
	return kube.TrimAndIntern(obj)
}

// trimClaim keeps identity, labels (group selectors), finalizers, the bound volume, the volume
// mode, the data source (restores in progress) and the phase.
func trimClaim(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		TypeMeta: pvc.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: pvc.Name, Namespace: pvc.Namespace, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion,
			Labels: pvc.Labels, Finalizers: pvc.Finalizers, DeletionTimestamp: pvc.DeletionTimestamp,
			CreationTimestamp: pvc.CreationTimestamp,
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			VolumeName: pvc.Spec.VolumeName, VolumeMode: pvc.Spec.VolumeMode,
			DataSource: pvc.Spec.DataSource, DataSourceRef: pvc.Spec.DataSourceRef,
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: pvc.Status.Phase},
	}
}

// trimVolume keeps identity, the CSI driver and handle, the volume mode, the node affinity
// (distributed snapshotting) and the claim's namespace and name (a group's members name it).
func trimVolume(pv *corev1.PersistentVolume) *corev1.PersistentVolume {
	out := &corev1.PersistentVolume{
		TypeMeta: pv.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: pv.Name, UID: pv.UID, ResourceVersion: pv.ResourceVersion, DeletionTimestamp: pv.DeletionTimestamp,
		},
		Spec: corev1.PersistentVolumeSpec{VolumeMode: pv.Spec.VolumeMode, NodeAffinity: pv.Spec.NodeAffinity},
	}
	if csi := pv.Spec.CSI; csi != nil {
		out.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: csi.Driver, VolumeHandle: csi.VolumeHandle}
	}
	if ref := pv.Spec.ClaimRef; ref != nil {
		out.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ref.Namespace, Name: ref.Name}
	}
	return out
}
