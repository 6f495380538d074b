package snapshot

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// restoreClaim is a pending claim restored from snapshot "snap", changed by opts.
func restoreClaim(opts ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "restore", Namespace: "ns", ResourceVersion: "1"},
		Spec: corev1.PersistentVolumeClaimSpec{
			DataSource: &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: "snap"}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	for _, o := range opts {
		o(pvc)
	}
	return pvc
}

func onNode(node string) func(*snapshotv1.VolumeSnapshotContent) {
	return func(c *snapshotv1.VolumeSnapshotContent) { c.Labels = map[string]string{protocol.LabelManagedBy: node} }
}

// TestRestoreSteeredToSnapshotNode: with distributed snapshotting, a pending claim restored from a
// node-local snapshot gets the snapshot's node as its selected node, once; claims placed already,
// bound or going, and snapshots of no node are left alone.
func TestRestoreSteeredToSnapshotNode(t *testing.T) {
	tests := []struct {
		name        string
		distributed bool
		claim       *corev1.PersistentVolumeClaim
		content     func(*snapshotv1.VolumeSnapshotContent)
		wantNode    string // the claim's selected node after the sync; "" for none
		writes      string // the writes to the core API
	}{
		{name: "pending claim goes to the snapshot's node", distributed: true, claim: restoreClaim(), content: onNode("node-2"),
			wantNode: "node-2", writes: "patch persistentvolumeclaims"},
		{name: "not distributed", claim: restoreClaim(), content: onNode("node-2")},
		{name: "content of no node", distributed: true, claim: restoreClaim(), content: func(*snapshotv1.VolumeSnapshotContent) {}},
		{name: "node chosen already", distributed: true, content: onNode("node-2"), wantNode: "node-1",
			claim: restoreClaim(func(p *corev1.PersistentVolumeClaim) { p.Annotations = map[string]string{annSelectedNode: "node-1"} })},
		{name: "bound claim", distributed: true, content: onNode("node-2"),
			claim: restoreClaim(func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeName, p.Status.Phase = "pv-r", corev1.ClaimBound })},
		{name: "claim being deleted", distributed: true, content: onNode("node-2"),
			claim: restoreClaim(func(p *corev1.PersistentVolumeClaim) {
				p.DeletionTimestamp, p.Finalizers = ptr.To(metav1.Now()), []string{"kubernetes.io/pvc-protection"}
			})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs := newSnapshot(boundTo(protocol.ContentName("vs-uid")))
			content := newContent(protocol.ContentName("vs-uid"), readyContent, tc.content)
			c, kube, _, _ := testController(t, []runtime.Object{vs, content, tc.claim}...)
			c.single.distributedSnapshotting = tc.distributed
			if err := c.singles.syncSnapshot(context.Background(), vs); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(writes(kube.Actions()), ","); got != tc.writes {
				t.Errorf("writes to the core API %q, want %q", got, tc.writes)
			}
			got, err := kube.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "restore", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if node := got.Annotations[annSelectedNode]; node != tc.wantNode {
				t.Errorf("selected node %q, want %q", node, tc.wantNode)
			}
		})
	}
}
