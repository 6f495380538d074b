package snapshot

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// TestSyncContentRequests checks the API calls a content sync makes once its snapshot is gone:
// none at all when the content is already the sidecar's.
func TestSyncContentRequests(t *testing.T) {
	marked := func(c *snapshotv1.VolumeSnapshotContent) {
		c.Annotations = map[string]string{protocol.AnnBeingDeleted: protocol.AnnValueYes}
	}
	deleted := func(c *snapshotv1.VolumeSnapshotContent) { c.DeletionTimestamp = ptr(metav1.Now()) }
	retain := func(c *snapshotv1.VolumeSnapshotContent) {
		c.Spec.DeletionPolicy = snapshotv1.VolumeSnapshotContentRetain
	}
	tests := []struct {
		name    string
		content *snapshotv1.VolumeSnapshotContent
		calls   string // comma-separated "verb resource", in order
	}{
		{name: "snapshot gone: confirmed live, annotated, deleted",
			content: newContent("c", readyContent),
			calls:   "get volumesnapshots,patch volumesnapshotcontents,delete volumesnapshotcontents"},
		{name: "annotated but not deleted yet: confirmed live, deleted",
			content: newContent("c", readyContent, marked),
			calls:   "get volumesnapshots,delete volumesnapshotcontents"},
		{name: "annotated and deleted: the sidecar's, no calls", content: newContent("c", readyContent, marked, deleted)},
		{name: "Retain, annotated: nothing left to do, no calls", content: newContent("c", readyContent, marked, retain)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _, snap, _ := testController(t, tc.content)
			if err := c.syncContent(context.Background(), tc.content); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(calls(snap.Actions()), ","); got != tc.calls {
				t.Errorf("calls:\n got %s\nwant %s", got, tc.calls)
			}
		})
	}
}

func calls(actions []k8stesting.Action) []string {
	var out []string
	for _, a := range actions {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return out
}
