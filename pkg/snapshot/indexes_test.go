package snapshot

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	snapfake "github.com/shutter-csi/shutter/client/clientset/versioned/fake"
)

// TestSnapshotsBySourcePVC: only snapshots that still depend on their claim are indexed under it,
// so a claim's writes wake them and not the ready snapshots taken of it before.
func TestSnapshotsBySourcePVC(t *testing.T) {
	now := metav1.Now()
	snapshot := func(ready, deleting bool) *snapshotv1.VolumeSnapshot {
		vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "snap"},
			Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("data")}}}
		if ready {
			vs.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
		}
		if deleting {
			vs.DeletionTimestamp = &now
		}
		return vs
	}
	failed := snapshot(false, false)
	failed.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(false), Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("claim not bound")}}
	preProvisioned := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pre"},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: ptr.To("content")}}}
	for _, tc := range []struct {
		name string
		vs   *snapshotv1.VolumeSnapshot
		want []string
	}{
		{name: "being taken", vs: snapshot(false, false), want: []string{"ns/data"}},
		{name: "failed, waits for a change of its claim", vs: failed, want: []string{"ns/data"}},
		{name: "ready", vs: snapshot(true, false), want: nil},
		{name: "ready and being deleted", vs: snapshot(true, true), want: []string{"ns/data"}},
		{name: "pre-provisioned", vs: preProvisioned, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := snapshotsBySourcePVC(tc.vs)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("snapshotsBySourcePVC = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestNewOnFreshFactoriesAgain: a controller built a second time in the same process, on new
// factories (a restart in tests, a new term as leader), gets informers of its own: adding its
// indexers must not find the first controller's there.
func TestNewOnFreshFactoriesAgain(t *testing.T) {
	clients := Clients{Kube: kubefake.NewClientset(), Snapshots: snapfake.NewClientset()}
	for i := range 2 {
		kubeInformers, snapInformers := InformerFactories(clients)
		if _, err := New(clients, kubeInformers, snapInformers, record.NewFakeRecorder(10), Options{}); err != nil {
			t.Fatalf("controller %d: %v", i+1, err)
		}
	}
}
