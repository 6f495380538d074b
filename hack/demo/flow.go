package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/test/stack"
)

const (
	namespace  = "shutter-demo"
	volumeSize = 64 << 20
	timeout    = 2 * time.Minute
)

// flow is the volume, snapshot and restore part of the demo.
type flow struct {
	*demo
	source, restored       stack.Claim
	sourceID, restoredID   string
	written                int64
	snapshot               *snapshotv1.VolumeSnapshot
	content                *snapshotv1.VolumeSnapshotContent
	backendBefore, backend int
}

func (d *demo) snapshotRestore(ctx context.Context) error {
	f := &flow{demo: d}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"provision a volume through the driver; bind a PV and PVC", f.provision},
		{"write data into the volume's backing folder", f.write},
		{"take a VolumeSnapshot (default class) until readyToUse", f.take},
		{"restore: CreateVolume from the snapshot; bind a PV and PVC", f.restore},
		{"compare the restored data byte for byte", f.compare},
		{"delete the restored claim and the snapshot", f.deleteSnapshot},
		{"check content and backend snapshot are gone", f.checkGone},
		{"delete the source claim (finalizer released) and volume", f.deleteSource},
		{"helm uninstall", func(ctx context.Context) error { return d.chart.Uninstall(ctx, d.cluster.Kubeconfig) }},
	}
	for _, s := range steps {
		if err := d.do(s.name, func() error { return s.fn(ctx) }); err != nil {
			return err
		}
	}
	return nil
}

func (f *flow) provision(ctx context.Context) error {
	_, err := f.stack.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if f.sourceID, err = f.stack.CSI.CreateVolume(ctx, "demo-source", volumeSize, ""); err != nil {
		return err
	}
	f.source = stack.Claim{Namespace: namespace, Name: "data", Driver: stack.DefaultDriverName,
		VolumeHandle: f.sourceID, Size: volumeSize, StorageClass: "shutter-hostpath"}
	f.fact("source volume", "%s, claim %s/%s", f.sourceID, namespace, f.source.Name)
	return stack.CreateClaim(ctx, f.stack.Kube, f.source, true)
}

func (f *flow) write(context.Context) error {
	var err error
	f.written, err = stack.WriteData(f.stack.CSI.VolumePath(f.sourceID), uint64(time.Now().UnixNano()))
	return err
}

func (f *flow) take(ctx context.Context) error {
	snaps, err := f.stack.CSI.ListSnapshots(ctx)
	if err != nil {
		return err
	}
	f.backendBefore = len(snaps)
	vs := stack.NewSnapshot(namespace, "data-snap", f.source.Name, "")
	if _, err := f.stack.Snapshots.SnapshotV1().VolumeSnapshots(namespace).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		return err
	}
	if f.snapshot, err = stack.WaitSnapshot(ctx, f.stack.Snapshots, namespace, vs.Name, timeout, stack.Ready); err != nil {
		return err
	}
	name := ptr.Deref(f.snapshot.Status.BoundVolumeSnapshotContentName, "")
	if f.content, err = f.stack.Snapshots.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{}); err != nil {
		return err
	}
	st := f.snapshot.Status
	f.fact("snapshot", "%s/%s readyToUse=%v restoreSize=%s created=%s", namespace, vs.Name,
		ptr.Deref(st.ReadyToUse, false), st.RestoreSize, st.CreationTime.Format(time.RFC3339))
	f.fact("content", "%s class=%s deletionPolicy=%s snapshotHandle=%s", f.content.Name,
		ptr.Deref(f.content.Spec.VolumeSnapshotClassName, ""), f.content.Spec.DeletionPolicy,
		ptr.Deref(f.content.Status.SnapshotHandle, ""))
	return nil
}

func (f *flow) restore(ctx context.Context) error {
	handle := ptr.Deref(f.content.Status.SnapshotHandle, "")
	var err error
	if f.restoredID, err = f.stack.CSI.CreateVolume(ctx, "demo-restored", volumeSize, handle); err != nil {
		return err
	}
	f.restored = stack.Claim{Namespace: namespace, Name: "data-restored", Driver: stack.DefaultDriverName,
		VolumeHandle: f.restoredID, Size: volumeSize, StorageClass: "shutter-hostpath", FromSnapshot: f.snapshot.Name}
	f.fact("restored volume", "%s, claim %s/%s (dataSource VolumeSnapshot %s)", f.restoredID, namespace, f.restored.Name, f.snapshot.Name)
	return stack.CreateClaim(ctx, f.stack.Kube, f.restored, true)
}

func (f *flow) compare(context.Context) error {
	files, size, err := stack.CompareTrees(f.stack.CSI.VolumePath(f.sourceID), f.stack.CSI.VolumePath(f.restoredID))
	if err != nil {
		return err
	}
	if size != f.written {
		return fmt.Errorf("compared %d bytes, wrote %d", size, f.written)
	}
	f.fact("data", "%d files, %d bytes written; restored copy identical", files, size)
	return nil
}

func (f *flow) deleteSnapshot(ctx context.Context) error {
	if err := f.deleteVolume(ctx, f.restored, f.restoredID); err != nil {
		return err
	}
	snaps := f.stack.Snapshots.SnapshotV1().VolumeSnapshots(namespace)
	if err := snaps.Delete(ctx, f.snapshot.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return stack.WaitGone(ctx, timeout, "VolumeSnapshot "+f.snapshot.Name, func(ctx context.Context) error {
		_, err := snaps.Get(ctx, f.snapshot.Name, metav1.GetOptions{})
		return err
	})
}

func (f *flow) checkGone(ctx context.Context) error {
	contents := f.stack.Snapshots.SnapshotV1().VolumeSnapshotContents()
	err := stack.WaitGone(ctx, timeout, "VolumeSnapshotContent "+f.content.Name, func(ctx context.Context) error {
		_, err := contents.Get(ctx, f.content.Name, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return err
	}
	snaps, err := f.stack.CSI.ListSnapshots(ctx)
	if err != nil {
		return err
	}
	handle := ptr.Deref(f.content.Status.SnapshotHandle, "")
	if slices.ContainsFunc(snaps, func(s *csi.Snapshot) bool { return s.GetSnapshotId() == handle }) {
		return fmt.Errorf("backend snapshot %s still listed by the driver", handle)
	}
	f.backend = len(snaps)
	f.fact("after deletion", "snapshot, content and backend snapshot %s gone (driver lists %d snapshots, %d before)",
		handle, f.backend, f.backendBefore)
	return nil
}

func (f *flow) deleteSource(ctx context.Context) error {
	if err := f.deleteVolume(ctx, f.source, f.sourceID); err != nil {
		return err
	}
	err := f.stack.Kube.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{})
	f.fact("cleanup", "claims, volumes and namespace %s deleted; the control plane and its folder are removed on exit", namespace)
	return err
}

// deleteVolume deletes claim with its PV, waiting until both are gone, and then the driver's
// volume id behind them.
func (f *flow) deleteVolume(ctx context.Context, claim stack.Claim, id string) error {
	if err := stack.DeleteClaim(ctx, f.stack.Kube, claim); err != nil {
		return err
	}
	return f.stack.CSI.DeleteVolume(ctx, id)
}
