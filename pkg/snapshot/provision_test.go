package snapshot

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

func localVolume(node string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}},
	}}
	if node != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}}}
	}
	return pv
}

func TestNewContent(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "prod", UID: "u1"}}
	class := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Driver: "d",
		DeletionPolicy: snapshotv1.VolumeSnapshotContentRetain}
	tests := []struct {
		name    string
		opts    Options
		pvc     corev1.PersistentVolumeClaim
		pv      *corev1.PersistentVolume
		check   func(*snapshotv1.VolumeSnapshotContent) bool
		wantErr string
	}{
		{name: "plain", pv: localVolume(""), check: func(c *snapshotv1.VolumeSnapshotContent) bool {
			return c.Name == "snapcontent-u1" && c.Spec.SourceVolumeMode == nil && c.Labels == nil &&
				c.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentRetain && *c.Spec.Source.VolumeHandle == "h" &&
				c.Spec.VolumeSnapshotRef.UID == "u1" && c.Finalizers[0] == protocol.ContentBoundFinalizer
		}},
		{name: "volume mode recorded", opts: Options{PreventVolumeModeConversion: true},
			pvc: corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{VolumeMode: &block}}, pv: localVolume(""),
			check: func(c *snapshotv1.VolumeSnapshotContent) bool { return *c.Spec.SourceVolumeMode == block }},
		{name: "volume mode defaults to Filesystem", opts: Options{PreventVolumeModeConversion: true}, pv: localVolume(""),
			check: func(c *snapshotv1.VolumeSnapshotContent) bool {
				return *c.Spec.SourceVolumeMode == corev1.PersistentVolumeFilesystem
			}},
		{name: "distributed: managed-by the volume's node", opts: Options{DistributedSnapshotting: true}, pv: localVolume("node-7"),
			check: func(c *snapshotv1.VolumeSnapshotContent) bool { return c.Labels[protocol.LabelManagedBy] == "node-7" }},
		{name: "distributed without node affinity", opts: Options{DistributedSnapshotting: true}, pv: localVolume(""),
			wantErr: "node affinity"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := &snapshotKind{preventVolumeModeConversion: tc.opts.PreventVolumeModeConversion, distributedSnapshotting: tc.opts.DistributedSnapshotting}
			content, err := k.newContent(vs, &tc.pvc, tc.pv, class)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want error %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(content) {
				t.Fatalf("content %+v, err %v", content, err)
			}
		})
	}
}

func TestWaitForCRDs(t *testing.T) {
	kube := fake.NewClientset()
	start := time.Now()
	err := waitForCRDs(context.Background(), kube, time.Second)
	if err == nil || !strings.Contains(err.Error(), "install Shutter's CRDs") {
		t.Fatalf("got %v, want a clear error", err)
	}
	if time.Since(start) < time.Second {
		t.Error("gave up without backing off")
	}
	kube.Resources = []*metav1.APIResourceList{{GroupVersion: snapshotv1.SchemeGroupVersion.String(), APIResources: []metav1.APIResource{
		{Name: "volumesnapshots"}, {Name: "volumesnapshotcontents"}, {Name: "volumesnapshotclasses"},
	}}}
	if err := waitForCRDs(context.Background(), kube, time.Second); err != nil {
		t.Fatalf("CRDs are served, got %v", err)
	}
}
