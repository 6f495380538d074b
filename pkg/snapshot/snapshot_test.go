package snapshot

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

func contentWith(status *snapshotv1.VolumeSnapshotContentStatus) *snapshotv1.VolumeSnapshotContent {
	return &snapshotv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: "snapcontent-1"}, Status: status}
}

func TestDesiredStatus(t *testing.T) {
	created := time.Date(2026, 3, 4, 10, 11, 12, 999, time.UTC)
	tests := []struct {
		name    string
		content *snapshotv1.VolumeSnapshotContent
		check   func(*snapshotv1.VolumeSnapshotStatus) bool
	}{
		{"no content status: bound, not ready", contentWith(nil), func(s *snapshotv1.VolumeSnapshotStatus) bool {
			return *s.BoundVolumeSnapshotContentName == "snapcontent-1" && !*s.ReadyToUse && s.CreationTime == nil
		}},
		{"ready content: time in seconds, size as a quantity", contentWith(&snapshotv1.VolumeSnapshotContentStatus{
			ReadyToUse: ptr.To(true), CreationTime: ptr.To(created.UnixNano()), RestoreSize: ptr.To(int64(10 << 30)),
		}), func(s *snapshotv1.VolumeSnapshotStatus) bool {
			return *s.ReadyToUse && s.CreationTime.Time.Equal(created.Truncate(time.Second)) && s.RestoreSize.String() == "10Gi"
		}},
		{"content error is mirrored", contentWith(&snapshotv1.VolumeSnapshotContentStatus{
			Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("backend full")},
		}), func(s *snapshotv1.VolumeSnapshotStatus) bool {
			return !*s.ReadyToUse && *s.Error.Message == "backend full"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs := &snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{
				VolumeGroupSnapshotName: ptr.To("group"), Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("old")},
			}}
			got := desiredStatus(vs, tc.content)
			if !tc.check(got) {
				t.Errorf("status %+v", got)
			}
			if *got.VolumeGroupSnapshotName != "group" {
				t.Error("the group name was lost")
			}
			if tc.content.Status == nil && got.Error != nil {
				t.Error("an old controller error survived binding")
			}
		})
	}
}

func TestBeingTaken(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name string
		vs   snapshotv1.VolumeSnapshot
		want bool
	}{
		{"new", snapshotv1.VolumeSnapshot{}, true},
		{"not ready", snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(false)}}, true},
		{"ready", snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}}, false},
		{"failed", snapshotv1.VolumeSnapshot{Status: &snapshotv1.VolumeSnapshotStatus{Error: &snapshotv1.VolumeSnapshotError{}}}, false},
		{"deleting", snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, false},
	}
	for _, tc := range tests {
		if got := beingTaken(&tc.vs); got != tc.want {
			t.Errorf("%s: got %v", tc.name, got)
		}
	}
}

func TestRestoreSource(t *testing.T) {
	group := snapshotv1.GroupName
	other := "other.example.com"
	tests := []struct {
		name string
		spec corev1.PersistentVolumeClaimSpec
		want string
	}{
		{"dataSource", corev1.PersistentVolumeClaimSpec{DataSource: &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: "s"}}, "s"},
		{"dataSourceRef", corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: "r"}}, "r"},
		{"other group", corev1.PersistentVolumeClaimSpec{DataSource: &corev1.TypedLocalObjectReference{APIGroup: &other, Kind: "VolumeSnapshot", Name: "s"}}, ""},
		{"clone", corev1.PersistentVolumeClaimSpec{DataSource: &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "p"}}, ""},
	}
	for _, tc := range tests {
		if got := restoreSource(&corev1.PersistentVolumeClaim{Spec: tc.spec}); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
