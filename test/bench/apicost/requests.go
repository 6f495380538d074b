package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

const (
	beingCreated = "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
	claimFinal   = "snapshot.storage.kubernetes.io/pvc-as-source-protection"
)

// content is the content the controller creates for snapshot i.
func (e *env) content(i int) *snapshotv1.VolumeSnapshotContent {
	snap := e.get(e.name("snap", i)).(*snapshotv1.VolumeSnapshot)
	return &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: e.name("content", i),
			Finalizers: []string{"snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"}},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete, Driver: "hostpath.csi.shutter.dev",
			Source:                  snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To(fmt.Sprintf("vol-%032d", i))},
			SourceVolumeMode:        ptr.To(corev1.PersistentVolumeFilesystem),
			VolumeSnapshotClassName: ptr.To("shutter-hostpath"),
			VolumeSnapshotRef:       corev1Ref(snap),
		},
	}
}

// claimPatch adds or removes the claim's finalizer as a merge patch of the whole list.
func (e *env) claimPatch(on bool, opts metav1.PatchOptions) func(context.Context, int) error {
	return func(ctx context.Context, i int) error {
		claims := e.kube.CoreV1().PersistentVolumeClaims(namespace)
		cur, err := claims.Get(ctx, e.name("claim", i), metav1.GetOptions{ResourceVersion: "0"})
		if err != nil {
			return err
		}
		finalizers := `["kubernetes.io/pvc-protection"]`
		if on {
			finalizers = `["kubernetes.io/pvc-protection",` + fmt.Sprintf("%q", claimFinal) + `]`
		}
		body := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"finalizers":%s}}`, cur.ResourceVersion, finalizers)
		_, err = claims.Patch(ctx, cur.Name, types.MergePatchType, []byte(body), opts)
		return err
	}
}

// contentAnnotation sets or removes being-created as a merge patch.
func (e *env) contentAnnotation(on bool, opts metav1.PatchOptions) func(context.Context, int) error {
	return func(ctx context.Context, i int) error {
		cur := e.get(e.name("content", i)).(*snapshotv1.VolumeSnapshotContent)
		value := "null"
		if on {
			value = `"yes"`
		}
		body := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:%s}}}`, cur.ResourceVersion, beingCreated, value)
		out, err := e.snaps.SnapshotV1().VolumeSnapshotContents().Patch(ctx, cur.Name, types.MergePatchType, []byte(body), opts)
		if err == nil {
			e.put(cur.Name, out)
		}
		return err
	}
}

// contentUpdate sets or removes being-created with a PUT of the object as last written, without
// its managedFields (as the informers cache it).
func (e *env) contentUpdate(on bool) func(context.Context, int) error {
	return func(ctx context.Context, i int) error {
		cur := e.get(e.name("content", i)).(*snapshotv1.VolumeSnapshotContent).DeepCopy()
		cur.ManagedFields = nil
		if on {
			metav1.SetMetaDataAnnotation(&cur.ObjectMeta, beingCreated, "yes")
		} else {
			delete(cur.Annotations, beingCreated)
		}
		out, err := e.snaps.SnapshotV1().VolumeSnapshotContents().Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			e.put(cur.Name, out)
		}
		return err
	}
}

// contentStatus writes the sidecar's status, as a merge patch or a PUT.
func (e *env) contentStatus(put bool) func(context.Context, int) error {
	return func(ctx context.Context, i int) error {
		cur := e.get(e.name("content", i)).(*snapshotv1.VolumeSnapshotContent).DeepCopy()
		cur.ManagedFields = nil
		now := time.Now().UnixNano() + int64(e.round)
		cur.Status = &snapshotv1.VolumeSnapshotContentStatus{CreationTime: &now, ReadyToUse: ptr.To(true),
			RestoreSize: ptr.To[int64](1 << 20), SnapshotHandle: ptr.To(fmt.Sprintf("snap-%032d", i))}
		client := e.snaps.SnapshotV1().VolumeSnapshotContents()
		var out *snapshotv1.VolumeSnapshotContent
		var err error
		if put {
			out, err = client.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		} else {
			body := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"status":{"creationTime":%d,"readyToUse":true,"restoreSize":1048576,"snapshotHandle":"snap-%032d"}}`,
				cur.ResourceVersion, now, i)
			out, err = client.Patch(ctx, cur.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status")
		}
		if err == nil {
			e.put(cur.Name, out)
		}
		return err
	}
}

// snapshotStatus writes the controller's status of a ready snapshot with a PUT.
func (e *env) snapshotStatus() func(context.Context, int) error {
	return func(ctx context.Context, i int) error {
		cur := e.get(e.name("snap", i)).(*snapshotv1.VolumeSnapshot).DeepCopy()
		cur.ManagedFields = nil
		now := metav1.Now()
		cur.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(e.name("content", i)),
			CreationTime: &now, ReadyToUse: ptr.To(true), RestoreSize: &size}
		_, err := e.snaps.SnapshotV1().VolumeSnapshots(namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}
}

func corev1Ref(vs *snapshotv1.VolumeSnapshot) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: "snapshot.storage.k8s.io/v1", Kind: "VolumeSnapshot",
		Namespace: vs.Namespace, Name: vs.Name, UID: vs.UID}
}
