package stack

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

// Claim describes a PersistentVolume and a claim bound to it, as a provisioner would make them.
type Claim struct {
	Namespace, Name string
	// Driver and VolumeHandle make the volume a CSI volume; with an empty Driver it is a
	// hostPath volume instead (not snapshottable).
	Driver, VolumeHandle string
	Size                 int64
	StorageClass         string
	// FromSnapshot, when set, is the VolumeSnapshot the claim is restored from (its dataSource).
	FromSnapshot string
}

// PVName is the name of the claim's PersistentVolume.
func (c Claim) PVName() string { return "pv-" + c.Namespace + "-" + c.Name }

// CreateClaim creates the volume and the claim pre-bound to each other. With wait, it returns
// once the claim is Bound.
func CreateClaim(ctx context.Context, kube kubernetes.Interface, c Claim, waitBound bool) error {
	size := resource.NewQuantity(c.Size, resource.BinarySI)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: c.PVName()},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              c.StorageClass,
			VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
			ClaimRef:                      &corev1.ObjectReference{Namespace: c.Namespace, Name: c.Name},
		},
	}
	if c.Driver != "" {
		pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: c.Driver, VolumeHandle: c.VolumeHandle}
	} else {
		pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/tmp/" + c.PVName()}
	}
	if _, err := kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PersistentVolume %s: %w", pv.Name, err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *size}},
			StorageClassName: ptr.To(c.StorageClass),
			VolumeName:       pv.Name,
			VolumeMode:       ptr.To(corev1.PersistentVolumeFilesystem),
		},
	}
	if c.FromSnapshot != "" {
		pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{
			APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: c.FromSnapshot,
		}
	}
	if _, err := kube.CoreV1().PersistentVolumeClaims(c.Namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PersistentVolumeClaim %s/%s: %w", c.Namespace, c.Name, err)
	}
	if !waitBound {
		return nil
	}
	return WaitClaimBound(ctx, kube, c.Namespace, c.Name)
}

// WaitClaimBound waits until kube-controller-manager has bound the claim.
func WaitClaimBound(ctx context.Context, kube kubernetes.Interface, namespace, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pvc, err := kube.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pvc.Status.Phase == corev1.ClaimBound, nil
	})
	if err != nil {
		return fmt.Errorf("claim %s/%s not bound: %w", namespace, name, err)
	}
	return nil
}

// DeleteClaim deletes the claim and its volume object, and waits until both are gone (their
// finalizers released), so the names can be used again at once.
func DeleteClaim(ctx context.Context, kube kubernetes.Interface, c Claim) error {
	claims, volumes := kube.CoreV1().PersistentVolumeClaims(c.Namespace), kube.CoreV1().PersistentVolumes()
	if err := deleteAndWait(ctx, "claim "+c.Namespace+"/"+c.Name, func(ctx context.Context) error {
		return claims.Delete(ctx, c.Name, metav1.DeleteOptions{})
	}, func(ctx context.Context) error {
		_, err := claims.Get(ctx, c.Name, metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	return deleteAndWait(ctx, "PersistentVolume "+c.PVName(), func(ctx context.Context) error {
		return volumes.Delete(ctx, c.PVName(), metav1.DeleteOptions{})
	}, func(ctx context.Context) error {
		_, err := volumes.Get(ctx, c.PVName(), metav1.GetOptions{})
		return err
	})
}

// deleteAndWait calls del, then polls get until it reports NotFound.
func deleteAndWait(ctx context.Context, what string, del, get func(context.Context) error) error {
	if err := ignoreNotFound(del(ctx)); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := get(ctx)
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("%s not deleted: %w", what, err)
	}
	return nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
