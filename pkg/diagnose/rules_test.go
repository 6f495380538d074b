package diagnose

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// TestExplain covers the order of the rules on hand-built chains; test/integration/diagnose
// checks each reason on a real API server.
func TestExplain(t *testing.T) {
	now := metav1.Now()
	msg := "disk full"
	vs := func(opts ...func(*snapshotv1.VolumeSnapshot)) *snapshotv1.VolumeSnapshot {
		v := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "snap", UID: "u"}}
		for _, o := range opts {
			o(v)
		}
		return v
	}
	content := func(opts ...func(*snapshotv1.VolumeSnapshotContent)) *snapshotv1.VolumeSnapshotContent {
		c := &snapshotv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: snapshotv1.VolumeSnapshotContentSpec{
			Driver: "d", DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: "ns", Name: "snap", UID: "u"}}}
		for _, o := range opts {
			o(c)
		}
		return c
	}
	deleted := func(v *snapshotv1.VolumeSnapshot) {
		v.DeletionTimestamp, v.Finalizers = &now, []string{protocol.SnapshotAsSourceFinalizer}
	}
	live := holder{Lease: "kube-system/shutter-snapshotter-d", LeaseState: protocol.LeaseState{Live: true, Holder: "p", SinceRenewal: time.Second}}
	dead := holder{Lease: "kube-system/shutter-snapshotter-d", LeaseState: protocol.LeaseState{Holder: "p", SinceRenewal: 7 * time.Minute}}
	tests := []struct {
		name  string
		chain *chain
		want  Rule
		// reason is a part of the reason.
		reason string
	}{
		{"ready", &chain{vs: vs(func(v *snapshotv1.VolumeSnapshot) {
			v.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
		})}, RuleReady, "nothing is wrong"},
		{"a restore blocks deletion before the backend error", &chain{vs: vs(deleted), sidecar: dead,
			restoring: []*corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "r1"}}, {ObjectMeta: metav1.ObjectMeta{Name: "r2"}}},
			content: content(func(c *snapshotv1.VolumeSnapshotContent) {
				c.Status = &snapshotv1.VolumeSnapshotContentStatus{Error: &snapshotv1.VolumeSnapshotError{Message: &msg}}
			})}, RuleDeletionBlocked, "claim r1, r2 being restored"},
		{"backend error before a dead sidecar", &chain{vs: vs(), sidecar: dead, content: content(func(c *snapshotv1.VolumeSnapshotContent) {
			c.Status = &snapshotv1.VolumeSnapshotContentStatus{Error: &snapshotv1.VolumeSnapshotError{Message: &msg}}
		})}, RuleBackendError, "backend error: disk full"},
		{"dead sidecar", &chain{vs: vs(), content: content(), sidecar: dead}, RuleNoSidecar, "has renewed its lease for 7m"},
		{"no Lease at all", &chain{vs: vs(), content: content()}, RuleNoSidecar, "holds a Lease (external-snapshotter-leader-d or shutter-snapshotter-d"},
		{"only a tenant's Lease", &chain{vs: vs(), content: content(), sidecar: holder{Ignored: []string{"tenant/shutter-snapshotter-d"}}},
			RuleNoSidecar, "not counted: tenant/shutter-snapshotter-d, in a namespace where no csi-snapshotter can run"},
		{"renewed in the future", &chain{vs: vs(), content: content(), sidecar: holder{Lease: "kube-system/shutter-snapshotter-d",
			LeaseState: protocol.LeaseState{Holder: "p", Future: true}}}, RuleNoSidecar, "kube-system/shutter-snapshotter-d claims a renewal in the future"},
		{"unknown liveness is not called dead", &chain{vs: vs(), content: content(), sidecar: holder{Err: context.Canceled}},
			RuleSidecarWorking, "its liveness is unknown"},
		{"creating", &chain{vs: vs(), content: content(func(c *snapshotv1.VolumeSnapshotContent) {
			c.Annotations = map[string]string{protocol.AnnBeingCreated: "yes"}
		}), sidecar: live}, RuleSidecarWorking, "CreateSnapshot is in progress"},
		{"deleting content, dead sidecar", &chain{vs: vs(deleted), sidecar: dead, content: content(func(c *snapshotv1.VolumeSnapshotContent) {
			c.DeletionTimestamp, c.Finalizers = &now, []string{protocol.ContentBoundFinalizer}
		})}, RuleNoSidecar, "no sidecar for d"},
		{"deleting content, live sidecar", &chain{vs: vs(deleted), sidecar: live, content: content(func(c *snapshotv1.VolumeSnapshotContent) {
			c.DeletionTimestamp, c.Finalizers = &now, []string{protocol.ContentBoundFinalizer}
		})}, RuleSidecarDeleting, "to delete backend snapshot <none>"},
		{"retain left behind", &chain{content: content(func(c *snapshotv1.VolumeSnapshotContent) {
			c.Spec.DeletionPolicy = snapshotv1.VolumeSnapshotContentRetain
		})}, RuleRetainLeftBehind, "VolumeSnapshot ns/snap is gone"},
		{"delete content whose snapshot is gone", &chain{content: content()}, RuleWaitingForController, "delete this content"},
		{"no content yet", &chain{vs: vs(), contentName: "snapcontent-u", controller: live}, RuleWaitingForController, "create content snapcontent-u (leader p"},
		{"ready content, snapshot not updated", &chain{vs: vs(), content: content(func(c *snapshotv1.VolumeSnapshotContent) {
			c.Status = &snapshotv1.VolumeSnapshotContentStatus{ReadyToUse: ptr.To(true)}
		}), controller: dead}, RuleWaitingForController, "no snapshot-controller has renewed its lease for 7m"},
		{"two default classes", &chain{vs: vs(), driver: "d", defaults: make([]*snapshotv1.VolumeSnapshotClass, 2)}, RuleNoDefaultClass, "2 default VolumeSnapshotClasses for driver d"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := explain(tc.chain)
			if got.Rule != tc.want || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("got %s %q, want %s with %q", got.Rule, got.Reason, tc.want, tc.reason)
			}
		})
	}
}

func TestSortItems(t *testing.T) {
	items := []Item{{Kind: "B", Name: "x", AgeSeconds: 10}, {Kind: "A", Name: "y", AgeSeconds: 30}, {Kind: "A", Name: "a", AgeSeconds: 10}}
	if err := sortItems(items, "age"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range items {
		got = append(got, it.Name)
	}
	if strings.Join(got, ",") != "y,a,x" {
		t.Errorf("by age: %v, want y,a,x (oldest first, then kind and name)", got)
	}
	if err := sortItems(items, "size"); err == nil {
		t.Error("an unknown --sort-by key is accepted")
	}
}

func TestRunRejectsBadUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"frobnicate"}} {
		var out bytes.Buffer
		if err := Run(context.Background(), Options{Args: args, Out: &out, Err: &out, Kubeconfig: "/nonexistent"}); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	if err := Run(context.Background(), Options{Args: []string{"stuck"}, Output: "toml"}); err == nil || !strings.Contains(err.Error(), "toml") {
		t.Errorf("-o toml: %v", err)
	}
}
