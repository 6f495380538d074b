package protocol

import (
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

// Reporting are the kinds whose status says whether they are ready to use.
type Reporting interface {
	*snapshotv1.VolumeSnapshot | *snapshotv1.VolumeSnapshotContent |
		*groupv1.VolumeGroupSnapshot | *groupv1.VolumeGroupSnapshotContent
}

// Ready tells whether obj's status says readyToUse: true. No object, no status or no field is not
// ready.
func Ready[T Reporting](obj T) bool {
	switch o := any(obj).(type) {
	case *snapshotv1.VolumeSnapshot:
		return o != nil && o.Status != nil && ptr.Deref(o.Status.ReadyToUse, false)
	case *snapshotv1.VolumeSnapshotContent:
		return o != nil && o.Status != nil && ptr.Deref(o.Status.ReadyToUse, false)
	case *groupv1.VolumeGroupSnapshot:
		return o != nil && o.Status != nil && ptr.Deref(o.Status.ReadyToUse, false)
	case *groupv1.VolumeGroupSnapshotContent:
		return o != nil && o.Status != nil && ptr.Deref(o.Status.ReadyToUse, false)
	}
	return false
}
