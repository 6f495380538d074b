package schedule

import (
	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
)

// Kinds as the write layer names them in errors and in shutter_controller_api_writes_total.
const (
	kindSchedule      = "snapshotschedule"
	kindSnapshot      = "volumesnapshot"
	kindGroupSnapshot = "volumegroupsnapshot"
)

// writeLayer is the schedule reconciler's only way to change objects: a kube.Writer per kind.
// Status goes through the status subresource with the resourceVersion as precondition, deletes
// carry a uid precondition, and every result is remembered in the kind's own-write cache; each
// request is counted through Config.Writes (the snapshot-controller's
// shutter_controller_api_writes_total). TestNoDirectWrites proves that no other file calls a
// client's write methods.
type writeLayer struct {
	schedules *kube.Writer[*schedulev1alpha1.SnapshotSchedule]
	snapshots *kube.Writer[*snapshotv1.VolumeSnapshot]
	groups    *kube.Writer[*groupv1.VolumeGroupSnapshot]
}

func newWriteLayer(client clientset.Interface, opts kube.WriterOptions) *writeLayer {
	return &writeLayer{
		schedules: newWriter[*schedulev1alpha1.SnapshotSchedule](kindSchedule, client.ScheduleV1alpha1().SnapshotSchedules, opts),
		snapshots: newWriter[*snapshotv1.VolumeSnapshot](kindSnapshot, client.SnapshotV1().VolumeSnapshots, opts),
		groups:    newWriter[*groupv1.VolumeGroupSnapshot](kindGroupSnapshot, client.GroupsnapshotV1().VolumeGroupSnapshots, opts),
	}
}

// newWriter is the writer of kind through client, the generated typed client of a namespace; its
// own-write cache trims what it keeps as the informers do.
func newWriter[T kube.Object[T], C kube.Client[T]](kind string, client func(namespace string) C, opts kube.WriterOptions) *kube.Writer[T] {
	cache := controller.NewWrites[T]().WithTrim(controller.Trimmed[T](controller.TrimMeta))
	return kube.NewWriter(kind, func(namespace string) kube.Client[T] { return client(namespace) }, cache, opts)
}
