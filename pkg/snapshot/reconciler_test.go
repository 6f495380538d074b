package snapshot

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// TestNearlyDone: the single snapshots' queue takes first the snapshots whose content the
// sidecar has reported on and that are not ready or deleted yet.
func TestNearlyDone(t *testing.T) {
	content := protocol.ContentName("vs-uid")
	reported := newContent(content, readyContent)
	tests := []struct {
		name string
		objs []runtime.Object
		want bool
	}{
		{name: "content reported, snapshot not ready", objs: []runtime.Object{newSnapshot(boundTo(content)), reported}, want: true},
		{name: "content not reported", objs: []runtime.Object{newSnapshot(boundTo(content)), newContent(content)}},
		{name: "no content", objs: []runtime.Object{newSnapshot()}},
		{name: "no snapshot", objs: []runtime.Object{reported}},
		{name: "snapshot ready", objs: []runtime.Object{reported, newSnapshot(boundTo(content), func(vs *snapshotv1.VolumeSnapshot) {
			vs.Status.ReadyToUse = ptr.To(true)
		})}},
		{name: "snapshot deleted", objs: []runtime.Object{newSnapshot(boundTo(content), deleting), reported}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _, _, _ := testController(t, tc.objs...)
			if got := c.singles.nearlyDone(controller.Key{Namespace: "ns", Name: "snap"}); got != tc.want {
				t.Errorf("nearlyDone %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSettled: only ready, bound snapshots and reported contents that are not being deleted
// count as settled, the objects of a first list that are queued paced.
func TestSettled(t *testing.T) {
	content := protocol.ContentName("vs-uid")
	ready := func(vs *snapshotv1.VolumeSnapshot) { vs.Status.ReadyToUse = ptr.To(true) }
	c, _, _, _ := testController(t)
	for _, tc := range []struct {
		name string
		vs   *snapshotv1.VolumeSnapshot
		want bool
	}{
		{"new", newSnapshot(), false},
		{"bound, not ready", newSnapshot(boundTo(content)), false},
		{"bound and ready", newSnapshot(boundTo(content), ready), true},
		{"ready, being deleted", newSnapshot(boundTo(content), ready, deleting), false},
	} {
		if got := c.singles.settledSnapshot(tc.vs); got != tc.want {
			t.Errorf("snapshot %s: settled %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		c    *snapshotv1.VolumeSnapshotContent
		want bool
	}{
		{"not reported", newContent(content), false},
		{"reported", newContent(content, readyContent), true},
		{"reported, being deleted", newContent(content, readyContent, func(c *snapshotv1.VolumeSnapshotContent) {
			c.DeletionTimestamp = ptr.To(metav1.Now())
		}), false},
	} {
		if got := c.singles.settledContent(tc.c); got != tc.want {
			t.Errorf("content %s: settled %v, want %v", tc.name, got, tc.want)
		}
	}
}
