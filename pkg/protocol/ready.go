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

// Report is what obj's status says: whether it is ready to use, and its error (nil for none). No
// object, no status or no field is not ready and no error.
func Report[T Reporting](obj T) (ready bool, err *snapshotv1.VolumeSnapshotError) {
	switch o := any(obj).(type) {
	case *snapshotv1.VolumeSnapshot:
		if o != nil && o.Status != nil {
			return ptr.Deref(o.Status.ReadyToUse, false), o.Status.Error
		}
	case *snapshotv1.VolumeSnapshotContent:
		if o != nil && o.Status != nil {
			return ptr.Deref(o.Status.ReadyToUse, false), o.Status.Error
		}
	case *groupv1.VolumeGroupSnapshot:
		if o != nil && o.Status != nil {
			return ptr.Deref(o.Status.ReadyToUse, false), o.Status.Error
		}
	case *groupv1.VolumeGroupSnapshotContent:
		if o != nil && o.Status != nil {
			return ptr.Deref(o.Status.ReadyToUse, false), o.Status.Error
		}
	}
	return false, nil
}

// Ready tells whether obj's status says readyToUse: true.
func Ready[T Reporting](obj T) bool {
	ready, _ := Report(obj)
	return ready
}
