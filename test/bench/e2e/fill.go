package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/stack"
)

// With -fill, the snapshots between the measured waves are written straight into the API while
// the controller and the sidecar are stopped: each a VolumeSnapshot and its content, bound and
// ready, with the finalizers and statuses the two components would have written (four writes
// instead of a snapshot's ten, and no CSI call). The components then start again with all of
// them present, which is also a restart measured at that size. The measured waves around them go
// through the whole protocol. Filled objects carry fillLabel; their contents name backend
// snapshots the driver does not know, which DeleteSnapshot answers as already gone.

// fillPrefix starts the names of the snapshots written by fill.
const fillPrefix = "fill-"

// fillLabel marks the snapshots written by fill.
const fillLabel = "bench.shutter.dev/filled"

// fillClass is the chart's default VolumeSnapshotClass of the hostpath driver.
const fillClass = "shutter-hostpath"

// stopComponents stops the controller and the sidecar gracefully.
func (b *bench) stopComponents() {
	for _, p := range []*stack.Process{b.stack.Controllers[0], b.stack.Snapshotter} {
		p.Stop(30 * time.Second)
	}
}

// fill writes count bound, ready snapshots named from first on, with the components stopped,
// and starts them again, timing a new snapshot to ready. It returns the names and that restart.
func (b *bench) fill(ctx context.Context, first, count, present int) ([]string, map[string]float64, error) {
	b.progress("fill %d snapshots (%d..%d) with the controller and sidecar stopped", count, first, first+count-1)
	b.stopComponents()
	names := make([]string, count)
	start := time.Now()
	err := parallel(ctx, count, 32, func(ctx context.Context, i int) error {
		names[i] = fmt.Sprintf("%s%06d", fillPrefix, first+i)
		return b.fillOne(ctx, names[i], (first+i)%b.opts.sc.wave)
	})
	if err != nil {
		return nil, nil, err
	}
	b.progress("  filled in %.0fs; start the controller and sidecar with %d snapshots present", time.Since(start).Seconds(), present+count)
	restart, err := b.startBoth(ctx, present+count)
	return names, restart, err
}

// fillOne writes one snapshot of claim i and its content, as the components leave them.
func (b *bench) fillOne(ctx context.Context, name string, claim int) error {
	snaps, contents := b.snaps.SnapshotV1().VolumeSnapshots(namespace), b.snaps.SnapshotV1().VolumeSnapshotContents()
	vs := stack.NewSnapshot(namespace, name, claimName(claim), fillClass)
	vs.Labels = map[string]string{fillLabel: "true"}
	vs.Finalizers = []string{protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer}
	vs, err := snaps.Create(ctx, vs, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	content := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: "snapcontent-" + string(vs.UID), Finalizers: []string{protocol.ContentBoundFinalizer}},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{APIVersion: snapshotv1.SchemeGroupVersion.String(), Kind: "VolumeSnapshot",
				Namespace: namespace, Name: name, UID: vs.UID},
			DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete, Driver: stack.DefaultDriverName,
			VolumeSnapshotClassName: ptr.To(fillClass), SourceVolumeMode: ptr.To(corev1.PersistentVolumeFilesystem),
			Source: snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To(b.handles[claim])},
		},
	}
	if content, err = contents.Create(ctx, content, metav1.CreateOptions{}); err != nil {
		return err
	}
	now := time.Now()
	content.Status = &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To("filled-" + string(vs.UID)),
		CreationTime: ptr.To(now.UnixNano()), ReadyToUse: ptr.To(true), RestoreSize: ptr.To[int64](volumeSize)}
	if _, err := contents.UpdateStatus(ctx, content, metav1.UpdateOptions{}); err != nil {
		return err
	}
	vs.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(content.Name),
		CreationTime: ptr.To(metav1.NewTime(now)), ReadyToUse: ptr.To(true), RestoreSize: resource.NewQuantity(volumeSize, resource.BinarySI)}
	_, err = snaps.UpdateStatus(ctx, vs, metav1.UpdateOptions{})
	return err
}

// unfill removes filled snapshots and their contents with the components stopped (their
// finalizers dropped, then deleted) and starts the components again.
func (b *bench) unfill(ctx context.Context, names []string, present int) (map[string]float64, error) {
	b.progress("remove %d filled snapshots with the controller and sidecar stopped", len(names))
	b.stopComponents()
	snaps, contents := b.snaps.SnapshotV1().VolumeSnapshots(namespace), b.snaps.SnapshotV1().VolumeSnapshotContents()
	noFinalizers := []byte(`{"metadata":{"finalizers":null}}`)
	err := parallel(ctx, len(names), 32, func(ctx context.Context, i int) error {
		vs, err := snaps.Patch(ctx, names[i], types.MergePatchType, noFinalizers, metav1.PatchOptions{})
		if err != nil {
			return err
		}
		if err := snaps.Delete(ctx, names[i], metav1.DeleteOptions{}); err != nil {
			return err
		}
		content := "snapcontent-" + string(vs.UID)
		if _, err := contents.Patch(ctx, content, types.MergePatchType, noFinalizers, metav1.PatchOptions{}); err != nil {
			return err
		}
		return contents.Delete(ctx, content, metav1.DeleteOptions{})
	})
	if err != nil {
		return nil, err
	}
	return b.startBoth(ctx, present-len(names))
}

// startBoth starts the controller and the sidecar and times a new snapshot to ready, deleting
// it again; present is the number of snapshots there are besides it. The components' peak RSS
// then is the peak of their start-up lists; the API server's and etcd's CPU seconds until then
// are recorded too, since serving those lists is most of a start's work.
func (b *bench) startBoth(ctx context.Context, present int) (map[string]float64, error) {
	out := map[string]float64{"load": loadAverage(), "snapshots": float64(present)}
	server := map[string]float64{}
	for proc, pid := range b.pids() {
		if proc == procAPIServer || proc == procEtcd {
			server[proc], _ = cpuSeconds(pid)
		}
	}
	start := time.Now()
	for _, p := range []*stack.Process{b.stack.Controllers[0], b.stack.Snapshotter} {
		if err := p.Start(); err != nil {
			return nil, err
		}
	}
	name := fmt.Sprintf("probe-%06d", present)
	if err := b.timeNewSnapshot(ctx, name, claimName(0), start, out); err != nil {
		return nil, err
	}
	for proc, pid := range b.pids() {
		if proc == procController || proc == procSidecar {
			out[proc+".peak_rss_after_restart_mib"] = memoryMiB(pid, "VmHWM")
			out[proc+".cpu_s_after_restart"], _ = cpuSeconds(pid)
		}
		if before, ok := server[proc]; ok {
			now, _ := cpuSeconds(pid)
			out[proc+".cpu_s_after_restart"] = now - before
		}
	}
	b.progress("  new snapshot ready %.2fs after the start with %d present (controller peak %.0f MiB, sidecar peak %.0f MiB; CPU s: controller %.1f, sidecar %.1f, API server %.1f, etcd %.1f)",
		out["ready_after_restart_s"], present, out[procController+".peak_rss_after_restart_mib"], out[procSidecar+".peak_rss_after_restart_mib"],
		out[procController+".cpu_s_after_restart"], out[procSidecar+".cpu_s_after_restart"], out[procAPIServer+".cpu_s_after_restart"], out[procEtcd+".cpu_s_after_restart"])
	_, err := b.deleteSome(ctx, []string{name}, present)
	return out, err
}
