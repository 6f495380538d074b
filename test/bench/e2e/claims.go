package main

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/shutter-csi/shutter/test/stack"
)

const (
	volumeSize   = 1 << 20
	storageClass = "shutter-hostpath"
	// annBindCompleted is what the PV controller puts on a claim it has bound.
	annBindCompleted = "pv.kubernetes.io/bind-completed"
)

func claimName(i int) string { return fmt.Sprintf("claim-%05d", i) }

// createClaims creates count driver volumes and binds a PersistentVolume and claim to each.
func (b *bench) createClaims(ctx context.Context, count int) error {
	b.handles = make([]string, count)
	return parallel(ctx, count, 16, b.createClaim)
}

// createClaim writes the volume and claim already bound, as kube-controller-manager would leave
// them: with its default client limit of 20 QPS, letting it bind thousands of claims would take
// longer than the benchmark. Its PV controller finds nothing left to do.
func (b *bench) createClaim(ctx context.Context, i int) error {
	name := claimName(i)
	id, err := b.stack.CSI.CreateVolume(ctx, "bench-"+name, volumeSize, "")
	if err != nil {
		return err
	}
	b.handles[i] = id
	size := *resource.NewQuantity(volumeSize, resource.BinarySI)
	modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pvName := "pv-" + namespace + "-" + name
	claims := b.kube.CoreV1().PersistentVolumeClaims(namespace)
	pvc, err := claims.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: modes, StorageClassName: ptr.To(storageClass), VolumeName: pvName,
			Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	pv, err := b.kube.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity: corev1.ResourceList{corev1.ResourceStorage: size}, AccessModes: modes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain, StorageClassName: storageClass,
			VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem),
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: namespace, Name: name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: stack.DefaultDriverName, VolumeHandle: id}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if err := b.markBound(ctx, pv.Name, name, size, modes); err != nil {
		return fmt.Errorf("bind %s: %w", name, err)
	}
	return nil
}

// markBound sets the volume's and the claim's phase to Bound, retrying when the PV controller
// wrote in between.
func (b *bench) markBound(ctx context.Context, pvName, name string, size resource.Quantity, modes []corev1.PersistentVolumeAccessMode) error {
	pvs, claims := b.kube.CoreV1().PersistentVolumes(), b.kube.CoreV1().PersistentVolumeClaims(namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv, err := pvs.Get(ctx, pvName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pv.Status.Phase = corev1.VolumeBound
		_, err = pvs.UpdateStatus(ctx, pv, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pvc.Annotations[annBindCompleted] != "yes" {
			metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, annBindCompleted, "yes")
			if pvc, err = claims.Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: modes,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: size}}
		_, err = claims.UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
		return err
	})
}

// parallel calls fn for 0..n-1 with at most workers calls at a time and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	sem := make(chan struct{}, workers)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { firstErr = err; cancel() })
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return firstErr
}
