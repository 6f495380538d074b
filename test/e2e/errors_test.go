package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

// TestBadInputRecovers makes each kind of bad user input, expects a status error and a Warning
// event on the snapshot, fixes the input and expects the snapshot to become ready.
func TestBadInputRecovers(t *testing.T) {
	s := start(t)
	for _, tc := range []struct {
		name string
		// make creates the broken situation for a snapshot "snap" in ns (claim "source" unless
		// it sets up its own) and returns the class to use.
		make    func(t *testing.T, ns string) string
		wantErr string
		fix     func(t *testing.T, ns string)
	}{
		{
			name:    "missing class",
			make:    func(t *testing.T, ns string) string { newVolume(t, s, ns, "source"); return "e2e-later-" + ns },
			wantErr: "does not exist",
			fix: func(t *testing.T, ns string) {
				createClass(t, s, "e2e-later-"+ns, snapshotv1.VolumeSnapshotContentDelete, nil)
			},
		},
		{
			name:    "missing claim",
			make:    func(*testing.T, string) string { return "" },
			wantErr: "does not exist",
			fix:     func(t *testing.T, ns string) { newVolume(t, s, ns, "source") },
		},
		{
			name:    "unbound claim",
			make:    func(t *testing.T, ns string) string { unboundClaim(t, s, ns); return "" },
			wantErr: "not bound",
			fix:     func(t *testing.T, ns string) { bindClaim(t, s, ns) },
		},
		{
			name: "non-CSI volume",
			make: func(t *testing.T, ns string) string {
				c := stack.Claim{Namespace: ns, Name: "source", Size: volumeSize, StorageClass: defaultClass}
				if err := stack.CreateClaim(context.Background(), s.Kube, c, true); err != nil {
					t.Fatal(err)
				}
				return ""
			},
			wantErr: "not a CSI volume",
			fix: func(t *testing.T, ns string) {
				c := stack.Claim{Namespace: ns, Name: "source"}
				if err := stack.DeleteClaim(context.Background(), s.Kube, c); err != nil {
					t.Fatal(err)
				}
				newVolume(t, s, ns, "source")
			},
		},
		{
			name: "invalid secret template",
			make: func(t *testing.T, ns string) string {
				newVolume(t, s, ns, "source")
				createClass(t, s, "e2e-secret-"+ns, snapshotv1.VolumeSnapshotContentDelete, map[string]string{
					"csi.storage.k8s.io/snapshotter-secret-name":      "${pvc.name}",
					"csi.storage.k8s.io/snapshotter-secret-namespace": ns,
				})
				return "e2e-secret-" + ns
			},
			wantErr: "not allowed",
			fix: func(t *testing.T, ns string) {
				classes := s.Snapshots.SnapshotV1().VolumeSnapshotClasses()
				if err := classes.Delete(context.Background(), "e2e-secret-"+ns, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				createClass(t, s, "e2e-secret-"+ns, snapshotv1.VolumeSnapshotContentDelete, nil)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testenv.Namespace(t, s.Kube)
			class := tc.make(t, ns)
			createSnapshot(t, s, ns, "snap", "source", class)
			vs, err := stack.WaitSnapshot(context.Background(), s.Snapshots, ns, "snap", readyTimeout, func(vs *snapshotv1.VolumeSnapshot) bool {
				return vs.Status != nil && vs.Status.Error != nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if msg := ptr.Deref(vs.Status.Error.Message, ""); !strings.Contains(msg, tc.wantErr) || stack.Ready(vs) {
				t.Errorf("status error %q (ready %v), want one containing %q and not ready", msg, stack.Ready(vs), tc.wantErr)
			}
			if event := warningEvent(t, s, ns, "snap"); !strings.Contains(event, tc.wantErr) {
				t.Errorf("Warning event %q, want one containing %q", event, tc.wantErr)
			}
			tc.fix(t, ns)
			vs = waitReady(t, s, ns, "snap")
			if vs.Status.Error != nil {
				t.Errorf("ready snapshot still reports error %q", ptr.Deref(vs.Status.Error.Message, ""))
			}
		})
	}
}

// unboundClaim is a claim "source" of a class nobody provisions, so it stays Pending.
func unboundClaim(t *testing.T, s *stack.Stack, ns string) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "source"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("e2e-nobody-provisions"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *newQuantity(volumeSize)}},
		},
	}
	if _, err := s.Kube.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// bindClaim makes a CSI volume and a PersistentVolume that claims the pending "source".
func bindClaim(t *testing.T, s *stack.Stack, ns string) {
	t.Helper()
	ctx := context.Background()
	id, err := s.CSI.CreateVolume(ctx, ns+"-late", volumeSize, "")
	if err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + ns + "-late"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *newQuantity(volumeSize)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "e2e-nobody-provisions",
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: "source"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: stack.DefaultDriverName, VolumeHandle: id}},
		},
	}
	if _, err := s.Kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := stack.WaitClaimBound(ctx, s.Kube, ns, "source"); err != nil {
		t.Fatal(err)
	}
}
