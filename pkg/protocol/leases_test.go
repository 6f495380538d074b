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
		{"hostpath.csi.shutter.io", []string{"shutter-snapshotter-hostpath.csi.shutter.io", "external-snapshotter-leader-hostpath-csi-shutter-io"}},
		// A name seen in the wild: openshift-storage.rbd.csi.ceph.com.
		{"openshift-storage.rbd.csi.ceph.com", []string{"shutter-snapshotter-openshift-storage.rbd.csi.ceph.com",
			"external-snapshotter-leader-openshift-storage-rbd-csi-ceph-com"}},
		{"Odd/Driver.", []string{"shutter-snapshotter-odd-driver", "external-snapshotter-leader-Odd-Driver-X"}},
	}
	for _, tc := range tests {
		if got := SidecarLeaseNames(tc.driver); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.driver, got, tc.want)
		}
	}
}

func TestReadLease(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lease := func(holder string, renewedAgo time.Duration, seconds int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &seconds}}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		if renewedAgo >= 0 {
			l.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-renewedAgo)}
		}
		return l
	}
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		want  LeaseState
	}{
		{"fresh", lease("pod-a", 3*time.Second, 15), LeaseState{Live: true, Holder: "pod-a", SinceRenewal: 3 * time.Second}},
		{"expired", lease("pod-a", 7*time.Minute, 15), LeaseState{Holder: "pod-a", SinceRenewal: 7 * time.Minute}},
		{"released", lease("", time.Second, 15), LeaseState{SinceRenewal: time.Second}},
		{"never renewed", lease("pod-a", -1, 15), LeaseState{Holder: "pod-a"}},
	}
	for _, tc := range tests {
		if got := ReadLease(tc.lease, now); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
