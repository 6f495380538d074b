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
	// opts count every write in count; the schedule reconciler's writers share them.
	opts kube.WriterOptions
}

// newWriteLayer writes claims with clients.Kube (with updates instead of patches when
// updateClaims), snapshots with clients.Snapshots and contents with clients.Contents
// (clients.Snapshots when nil).
func newWriteLayer(clients Clients, updateClaims bool) *writeLayer {
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
	w.opts = opts
	snaps, contents := clients.Snapshots, clients.Contents
	if contents == nil {
		contents = snaps
	}
	w.snapshots = newWriter[*snapshotv1.VolumeSnapshot]("volumesnapshot", snaps.SnapshotV1().VolumeSnapshots, opts)
	w.contents = newWriter[*snapshotv1.VolumeSnapshotContent]("volumesnapshotcontent", clusterScoped(contents.SnapshotV1().VolumeSnapshotContents), opts)
	claimOpts := opts
	claimOpts.UpdateMetadata = updateClaims
	w.claims = newWriter[*corev1.PersistentVolumeClaim]("persistentvolumeclaim", clients.Kube.CoreV1().PersistentVolumeClaims, claimOpts)
	w.groups = newWriter[*groupv1.VolumeGroupSnapshot]("volumegroupsnapshot", snaps.GroupsnapshotV1().VolumeGroupSnapshots, opts)
	w.groupContents = newWriter[*groupv1.VolumeGroupSnapshotContent]("volumegroupsnapshotcontent",
		clusterScoped(contents.GroupsnapshotV1().VolumeGroupSnapshotContents), opts)
	return w
}

// newWriter is the writer of kind through client, the generated typed client of a namespace.
func newWriter[T kube.Object[T], C kube.Client[T]](kind string, client func(namespace string) C, opts kube.WriterOptions) *kube.Writer[T] {
	return kube.NewWriter(kind, func(namespace string) kube.Client[T] { return client(namespace) }, newWrites[T](), opts)
}

// clusterScoped is the typed client of a cluster-scoped kind in the shape of a namespaced one's.
func clusterScoped[C any](client func() C) func(string) C {
	return func(string) C { return client() }
}

// newWrites is an own-write cache that trims what it keeps as the informers do.
func newWrites[T kube.Object[T]]() *controller.Writes[T] {
	return controller.NewWrites[T]().WithTrim(controller.Trimmed[T](trimForCache))
}
