package protocol

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSidecarLeaseNames(t *testing.T) {
	tests := []struct {
		driver string
		want   []string
	}{
		{"hostpath.csi.shutter.io", []string{"external-snapshotter-leader-hostpath-csi-shutter-io", "shutter-snapshotter-hostpath.csi.shutter.io"}},
		// A name seen in the wild: openshift-storage.rbd.csi.ceph.com.
		{"openshift-storage.rbd.csi.ceph.com", []string{"external-snapshotter-leader-openshift-storage-rbd-csi-ceph-com",
			"shutter-snapshotter-openshift-storage.rbd.csi.ceph.com"}},
		{"Odd/Driver.", []string{"external-snapshotter-leader-Odd-Driver-X", "shutter-snapshotter-odd-driver"}},
	}
	for _, tc := range tests {
		if got := SidecarLeaseNames(tc.driver); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.driver, got, tc.want)
		}
	}
}

func TestReadLease(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	// lease is held by holder ("" for none), renewed at renewed (zero: never), for seconds.
	lease := func(holder string, renewed time.Time, seconds int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &seconds}}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		if !renewed.IsZero() {
			l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
		}
		return l
	}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		want  LeaseState
	}{
		{"fresh", lease("pod-a", ago(3*time.Second), 15), LeaseState{Live: true, Holder: "pod-a", SinceRenewal: 3 * time.Second}},
		{"expired", lease("pod-a", ago(7*time.Minute), 15), LeaseState{Holder: "pod-a", SinceRenewal: 7 * time.Minute}},
		{"released", lease("", ago(time.Second), 15), LeaseState{SinceRenewal: time.Second}},
		{"never renewed", lease("pod-a", time.Time{}, 15), LeaseState{Holder: "pod-a"}},
		// A clock a little ahead renews a little in the future: live.
		{"renewed 20s ahead", lease("pod-a", now.Add(20*time.Second), 15), LeaseState{Live: true, Holder: "pod-a"}},
		// Renewed in 2099: no running component did that; it would be live for ever.
		{"renewed in 2099", lease("pod-a", time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), 15), LeaseState{Holder: "pod-a", Future: true}},
		{"renewed 2m ahead", lease("pod-a", now.Add(2*time.Minute), 15), LeaseState{Holder: "pod-a", Future: true}},
		// A duration of 68 years is taken as MaxLeaseDuration.
		{"endless duration, renewed 6m ago", lease("pod-a", ago(6*time.Minute), 1<<31-1), LeaseState{Holder: "pod-a", SinceRenewal: 6 * time.Minute}},
		{"endless duration, renewed 4m ago", lease("pod-a", ago(4*time.Minute), 1<<31-1), LeaseState{Live: true, Holder: "pod-a", SinceRenewal: 4 * time.Minute}},
	}
	for _, tc := range tests {
		if got := ReadLease(tc.lease, now); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
