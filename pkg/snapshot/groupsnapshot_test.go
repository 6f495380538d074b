package snapshot

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
)

// TestGroupReadyEvent: a group becoming ready is one status write, with a Normal event only
// under --ready-events; a group that was ready already writes nothing.
func TestGroupReadyEvent(t *testing.T) {
	for _, tc := range []struct {
		name       string
		events     bool
		wasReady   bool
		wantWrites int
		wantEvent  bool
	}{
		{name: "events off", wantWrites: 1},
		{name: "events on", events: true, wantWrites: 1, wantEvent: true},
		{name: "already ready", events: true, wasReady: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content := &groupv1.VolumeGroupSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: "groupsnapcontent-g"},
				Status: &groupv1.VolumeGroupSnapshotContentStatus{ReadyToUse: ptr.To(true)}}
			vgs := &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", UID: "g-uid"}}
			if tc.wasReady {
				vgs.Status = desiredGroupStatus(content, true)
			}
			c, _, snap, recorder := testController(t, vgs)
			c.opts.ReadyEvents = tc.events
			g, err := c.newGroups(snapinformers.NewSharedInformerFactory(snap, 0))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.r.writeStatus(context.Background(), vgs, g.r.kind.withStatus(vgs, content, true), content.Spec.Driver); err != nil {
				t.Fatal(err)
			}
			if got := len(writes(snap.Actions())); got != tc.wantWrites {
				t.Errorf("%d writes, want %d", got, tc.wantWrites)
			}
			if got := hasEvent(recorder, ReasonGroupReady); got != tc.wantEvent {
				t.Errorf("ready event %v, want %v", got, tc.wantEvent)
			}
		})
	}
}
