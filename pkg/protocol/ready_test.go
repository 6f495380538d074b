package protocol

import (
	"testing"

	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

func TestReady(t *testing.T) {
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"snapshot: none", Ready((*snapshotv1.VolumeSnapshot)(nil)), false},
		{"snapshot: no status", Ready(&snapshotv1.VolumeSnapshot{}), false},
		{"snapshot: no field", Ready(&snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{}}), false},
		{"snapshot: false", Ready(&snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(false)}}), false},
		{"snapshot: true", Ready(&snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}}), true},
		{"content: none", Ready((*snapshotv1.VolumeSnapshotContent)(nil)), false},
		{"content: no status", Ready(&snapshotv1.VolumeSnapshotContent{}), false},
		{"content: false", Ready(&snapshotv1.VolumeSnapshotContent{Status: &snapshotv1.VolumeSnapshotContentStatus{ReadyToUse: ptr.To(false)}}), false},
		{"content: true", Ready(&snapshotv1.VolumeSnapshotContent{Status: &snapshotv1.VolumeSnapshotContentStatus{ReadyToUse: ptr.To(true)}}), true},
		{"group: none", Ready((*groupv1.VolumeGroupSnapshot)(nil)), false},
		{"group: no status", Ready(&groupv1.VolumeGroupSnapshot{}), false},
		{"group: no field", Ready(&groupv1.VolumeGroupSnapshot{Status: &groupv1.VolumeGroupSnapshotStatus{}}), false},
		{"group: true", Ready(&groupv1.VolumeGroupSnapshot{Status: &groupv1.VolumeGroupSnapshotStatus{ReadyToUse: ptr.To(true)}}), true},
		{"group content: none", Ready((*groupv1.VolumeGroupSnapshotContent)(nil)), false},
		{"group content: no status", Ready(&groupv1.VolumeGroupSnapshotContent{}), false},
		{"group content: false", Ready(&groupv1.VolumeGroupSnapshotContent{Status: &groupv1.VolumeGroupSnapshotContentStatus{ReadyToUse: ptr.To(false)}}), false},
		{"group content: true", Ready(&groupv1.VolumeGroupSnapshotContent{Status: &groupv1.VolumeGroupSnapshotContentStatus{ReadyToUse: ptr.To(true)}}), true},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: Ready is %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}
