package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/stack"
)

const (
	classDelete = "chaos-delete"
	classRetain = "chaos-retain"
	classGroup  = "chaos-group"
	secretName  = "chaos-secret"
	// storageClass is the chart's StorageClass; volumeSize is each volume's size.
	storageClass = "shutter-hostpath"
	volumeSize   = 1 << 20
	// apiRetry bounds how long the harness retries one of its own API calls through faults.
	apiRetry = 3 * time.Minute
)

// retry calls fn until it succeeds, the error is one ok accepts, or apiRetry passes: the
// harness's own calls go straight to the API server, which the faults restart.
func retry(ctx context.Context, fn func(ctx context.Context) error, ok func(error) bool) error {
	deadline := time.Now().Add(apiRetry)
	delay := 100 * time.Millisecond
	for {
		err := fn(ctx)
		if err == nil || ok != nil && ok(err) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func isExists(err error) bool   { return apierrors.IsAlreadyExists(err) }
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// setUpObjects creates the namespace, the secret and the classes the workload uses.
func (e *env) setUpObjects(ctx context.Context) error {
	creates := []func(ctx context.Context) error{
		func(ctx context.Context) error {
			_, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
			return err
		},
		func(ctx context.Context) error {
			_, err := e.kube.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName},
				StringData: map[string]string{"token": "chaos"}}, metav1.CreateOptions{})
			return err
		},
	}
	secret := map[string]string{protocol.ParamSnapshotterSecretName: secretName, protocol.ParamSnapshotterSecretNamespace: namespace}
	for name, policy := range map[string]snapshotv1.DeletionPolicy{classDelete: snapshotv1.VolumeSnapshotContentDelete, classRetain: snapshotv1.VolumeSnapshotContentRetain} {
		class := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: stack.DefaultDriverName,
			DeletionPolicy: policy, Parameters: secret}
		creates = append(creates, func(ctx context.Context) error {
			_, err := e.snaps.SnapshotV1().VolumeSnapshotClasses().Create(ctx, class, metav1.CreateOptions{})
			return err
		})
	}
	group := &groupv1.VolumeGroupSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: classGroup}, Driver: stack.DefaultDriverName,
		DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
		Parameters:     map[string]string{protocol.ParamGroupSecretName: secretName, protocol.ParamGroupSecretNamespace: namespace}}
	creates = append(creates, func(ctx context.Context) error {
		_, err := e.snaps.GroupsnapshotV1().VolumeGroupSnapshotClasses().Create(ctx, group, metav1.CreateOptions{})
		return err
	})
	for _, create := range creates {
		if err := retry(ctx, create, isExists); err != nil {
			return err
		}
	}
	return nil
}

// newClaim creates a driver volume with a little data (or restored from a backend snapshot)
// and a claim bound to it, labelled with labels.
func (e *env) newClaim(ctx context.Context, name, fromHandle, fromSnapshot string, labels map[string]string) error {
	var id string
	err := retry(ctx, func(ctx context.Context) (err error) {
		id, err = e.stack.CSI.CreateVolume(ctx, namespace+"-"+name, volumeSize, fromHandle)
		return err
	}, nil)
	if err != nil {
		return err
	}
	if fromHandle == "" {
		// The disk-full fault may be on: a user would write again once there is room.
		write := func(context.Context) error {
			return os.WriteFile(filepath.Join(e.stack.CSI.VolumePath(id), "data.txt"), []byte("chaos "+name+"\n"), 0o644)
		}
		if err := retry(ctx, write, nil); err != nil {
			return err
		}
	}
	c := stack.Claim{Namespace: namespace, Name: name, Driver: stack.DefaultDriverName, VolumeHandle: id,
		Size: volumeSize, StorageClass: storageClass, FromSnapshot: fromSnapshot}
	if err := retry(ctx, func(ctx context.Context) error { return stack.CreateClaim(ctx, e.kube, c, false) }, isExists); err != nil {
		return err
	}
	if len(labels) == 0 {
		return nil
	}
	return retry(ctx, func(ctx context.Context) error {
		pvc, err := e.kube.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pvc.Labels = labels
		_, err = e.kube.CoreV1().PersistentVolumeClaims(namespace).Update(ctx, pvc, metav1.UpdateOptions{})
		return err
	}, nil)
}

// createSnapshot creates a dynamic VolumeSnapshot of claim.
func (e *env) createSnapshot(ctx context.Context, name, claim, class string) error {
	vs := stack.NewSnapshot(namespace, name, claim, class)
	return retry(ctx, func(ctx context.Context) error {
		_, err := e.snaps.SnapshotV1().VolumeSnapshots(namespace).Create(ctx, vs, metav1.CreateOptions{})
		return err
	}, isExists)
}

// createPreProvisioned takes a backend snapshot of the claim's volume directly, as an admin
// would, and creates a content for it and the VolumeSnapshot that names the content.
func (e *env) createPreProvisioned(ctx context.Context, name, volumeID string, policy snapshotv1.DeletionPolicy, class string) error {
	var handle string
	err := retry(ctx, func(ctx context.Context) (err error) {
		handle, err = e.stack.CSI.CreateSnapshot(ctx, "chaos-"+name, volumeID)
		return err
	}, nil)
	if err != nil {
		return err
	}
	content := &snapshotv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: name + "-content"},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: namespace, Name: name},
			DeletionPolicy:    policy, Driver: stack.DefaultDriverName, VolumeSnapshotClassName: ptr.To(class),
			Source: snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To(handle)},
		}}
	if err := retry(ctx, func(ctx context.Context) error {
		_, err := e.snaps.SnapshotV1().VolumeSnapshotContents().Create(ctx, content, metav1.CreateOptions{})
		return err
	}, isExists); err != nil {
		return err
	}
	vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: ptr.To(content.Name)}}}
	return retry(ctx, func(ctx context.Context) error {
		_, err := e.snaps.SnapshotV1().VolumeSnapshots(namespace).Create(ctx, vs, metav1.CreateOptions{})
		return err
	}, isExists)
}

// createGroup creates a VolumeGroupSnapshot of the claims labelled group=label.
func (e *env) createGroup(ctx context.Context, name, label string) error {
	vgs := &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: groupv1.VolumeGroupSnapshotSpec{VolumeGroupSnapshotClassName: ptr.To(classGroup),
			Source: groupv1.VolumeGroupSnapshotSource{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": label}}}}}
	return retry(ctx, func(ctx context.Context) error {
		_, err := e.snaps.GroupsnapshotV1().VolumeGroupSnapshots(namespace).Create(ctx, vgs, metav1.CreateOptions{})
		return err
	}, isExists)
}

func (e *env) deleteSnapshot(ctx context.Context, name string) error {
	return retry(ctx, func(ctx context.Context) error {
		return e.snaps.SnapshotV1().VolumeSnapshots(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	}, isNotFound)
}

func (e *env) deleteGroup(ctx context.Context, name string) error {
	return retry(ctx, func(ctx context.Context) error {
		return e.snaps.GroupsnapshotV1().VolumeGroupSnapshots(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	}, isNotFound)
}

func (e *env) deleteClaim(ctx context.Context, name string) error {
	return retry(ctx, func(ctx context.Context) error {
		return e.kube.CoreV1().PersistentVolumeClaims(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	}, isNotFound)
}

// readyHandle waits up to timeout for the snapshot to be ready and returns its backend handle.
func (e *env) readyHandle(ctx context.Context, name string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		vs, err := e.snaps.SnapshotV1().VolumeSnapshots(namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && stack.Ready(vs) {
			content, err := e.snaps.SnapshotV1().VolumeSnapshotContents().Get(ctx, ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, ""), metav1.GetOptions{})
			if err == nil && content.Status != nil && content.Status.SnapshotHandle != nil {
				return *content.Status.SnapshotHandle, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("snapshot %s not ready within %s", name, timeout)
}
