package snapshot

import (
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/metrics"
)

// writeLayer is the controller's only way to change objects: a kube.Writer per kind it writes.
// Metadata changes are JSON merge patches with a resourceVersion precondition, status goes
// through the status subresource, deletes carry a uid precondition; each result is recorded in
// the kind's own-write cache, and each request is counted (metrics.ControllerAPIWrites).
// TestNoDirectWrites proves that no other file calls a client's write methods.
type writeLayer struct {
	snapshots     *kube.Writer[*snapshotv1.VolumeSnapshot]
	contents      *kube.Writer[*snapshotv1.VolumeSnapshotContent]
	claims        *kube.Writer[*corev1.PersistentVolumeClaim]
	groups        *kube.Writer[*groupv1.VolumeGroupSnapshot]
	groupContents *kube.Writer[*groupv1.VolumeGroupSnapshotContent]
	count         *prometheus.CounterVec
}

// newWriteLayer writes claims with clients.Kube, snapshots with clients.Snapshots and contents
// with clients.Contents (clients.Snapshots when nil).
func newWriteLayer(clients Clients) *writeLayer {
	w := &writeLayer{count: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: metrics.ControllerAPIWrites,
		Help: "Writes of the snapshot-controller to the API server by kind, what was written (create, metadata, status, delete) and result.",
	}, []string{metrics.LabelKind, metrics.LabelWrite, metrics.LabelResult})}
	opts := kube.WriterOptions{Count: func(kind, what string, err error) {
		result := metrics.ResultOK
		if err != nil {
			result = metrics.ResultError
		}
		w.count.WithLabelValues(kind, what, result).Inc()
	}}
	snaps, contents := clients.Snapshots, clients.Contents
	if contents == nil {
		contents = snaps
	}
	w.snapshots = kube.NewWriter("volumesnapshot", func(ns string) kube.Client[*snapshotv1.VolumeSnapshot] {
		return snaps.SnapshotV1().VolumeSnapshots(ns)
	}, newWrites[*snapshotv1.VolumeSnapshot](), opts)
	w.contents = kube.NewWriter("volumesnapshotcontent", func(string) kube.Client[*snapshotv1.VolumeSnapshotContent] {
		return contents.SnapshotV1().VolumeSnapshotContents()
	}, newWrites[*snapshotv1.VolumeSnapshotContent](), opts)
	w.claims = kube.NewWriter("persistentvolumeclaim", func(ns string) kube.Client[*corev1.PersistentVolumeClaim] {
		return clients.Kube.CoreV1().PersistentVolumeClaims(ns)
	}, newWrites[*corev1.PersistentVolumeClaim](), opts)
	w.groups = kube.NewWriter("volumegroupsnapshot", func(ns string) kube.Client[*groupv1.VolumeGroupSnapshot] {
		return snaps.GroupsnapshotV1().VolumeGroupSnapshots(ns)
	}, newWrites[*groupv1.VolumeGroupSnapshot](), opts)
	w.groupContents = kube.NewWriter("volumegroupsnapshotcontent", func(string) kube.Client[*groupv1.VolumeGroupSnapshotContent] {
		return contents.GroupsnapshotV1().VolumeGroupSnapshotContents()
	}, newWrites[*groupv1.VolumeGroupSnapshotContent](), opts)
	return w
}

// newWrites is an own-write cache that trims what it keeps as the informers do.
func newWrites[T kube.Object[T]]() *controller.Writes[T] {
	return controller.NewWrites[T]().WithTrim(controller.Trimmed[T](trimForCache))
}
