package protocol

import (
	"testing"

	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

// TestReport: readiness and error of each kind, and what a missing object, status or field
// reports.
func TestReport(t *testing.T) {
	failed := &snapshotv1.VolumeSnapshotError{Message: ptr.To("backend full")}
	type report struct {
		ready bool
		err   *snapshotv1.VolumeSnapshotError
	}
	of := func(ready bool, err *snapshotv1.VolumeSnapshotError) report { return report{ready, err} }
	tests := []struct {
		name string
		got  report
		want report
	}{
		{"snapshot: none", of(Report((*snapshotv1.VolumeSnapshot)(nil))), report{}},
		{"snapshot: no status", of(Report(&snapshotv1.VolumeSnapshot{})), report{}},
		{"snapshot: no field", of(Report(&snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{}})), report{}},
		{"snapshot: false, error", of(Report(&snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{
			ReadyToUse: ptr.To(false), Error: failed}})), report{err: failed}},
		{"snapshot: true", of(Report(&snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}})),
			report{ready: true}},
		{"content: none", of(Report((*snapshotv1.VolumeSnapshotContent)(nil))), report{}},
		{"content: no status", of(Report(&snapshotv1.VolumeSnapshotContent{})), report{}},
		{"content: error", of(Report(&snapshotv1.VolumeSnapshotContent{Status: &snapshotv1.VolumeSnapshotContentStatus{Error: failed}})),
			report{err: failed}},
		{"content: true", of(Report(&snapshotv1.VolumeSnapshotContent{Status: &snapshotv1.VolumeSnapshotContentStatus{ReadyToUse: ptr.To(true)}})),
			report{ready: true}},
		{"group: none", of(Report((*groupv1.VolumeGroupSnapshot)(nil))), report{}},
		{"group: no field", of(Report(&groupv1.VolumeGroupSnapshot{Status: &groupv1.VolumeGroupSnapshotStatus{}})), report{}},
		{"group: error", of(Report(&groupv1.VolumeGroupSnapshot{Status: &groupv1.VolumeGroupSnapshotStatus{Error: failed}})),
			report{err: failed}},
		{"group: true", of(Report(&groupv1.VolumeGroupSnapshot{Status: &groupv1.VolumeGroupSnapshotStatus{ReadyToUse: ptr.To(true)}})),
			report{ready: true}},
		{"group content: none", of(Report((*groupv1.VolumeGroupSnapshotContent)(nil))), report{}},
		{"group content: error", of(Report(&groupv1.VolumeGroupSnapshotContent{Status: &groupv1.VolumeGroupSnapshotContentStatus{
			Error: failed}})), report{err: failed}},
		{"group content: true", of(Report(&groupv1.VolumeGroupSnapshotContent{Status: &groupv1.VolumeGroupSnapshotContentStatus{
			ReadyToUse: ptr.To(true)}})), report{ready: true}},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: Report is %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
	if Ready(&snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}}) != true ||
		Ready(&groupv1.VolumeGroupSnapshot{}) != false {
		t.Error("Ready does not say what Report says")
	}
}
