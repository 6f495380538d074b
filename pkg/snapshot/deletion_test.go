package snapshot

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	snapfake "github.com/shutter-csi/shutter/client/clientset/versioned/fake"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// TestSyncContentRequests checks the API calls a content sync makes once its snapshot is gone:
// none at all when the content is already the sidecar's.
func TestSyncContentRequests(t *testing.T) {
	marked := func(c *snapshotv1.VolumeSnapshotContent) {
		c.Annotations = map[string]string{protocol.AnnBeingDeleted: protocol.AnnValueYes}
	}
	deleted := func(c *snapshotv1.VolumeSnapshotContent) { c.DeletionTimestamp = ptr.To(metav1.Now()) }
	unprotected := func(c *snapshotv1.VolumeSnapshotContent) { c.Finalizers = nil }
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
		{name: "no finalizer: protected and annotated in one patch, deleted",
			content: newContent("c", readyContent, unprotected),
			calls:   "get volumesnapshots,patch volumesnapshotcontents,delete volumesnapshotcontents"},
		{name: "annotated while Retain, now Delete without finalizer: protected, deleted",
			content: newContent("c", readyContent, marked, unprotected),
			calls:   "get volumesnapshots,patch volumesnapshotcontents,delete volumesnapshotcontents"},
		{name: "annotated and deleted: the sidecar's, no calls", content: newContent("c", readyContent, marked, deleted)},
		{name: "Retain, annotated: nothing left to do, no calls", content: newContent("c", readyContent, marked, retain)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _, snap, _ := testController(t, tc.content)
			if err := c.singles.syncContent(context.Background(), tc.content); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(calls(snap.Actions()), ","); got != tc.calls {
				t.Errorf("calls:\n got %s\nwant %s", got, tc.calls)
			}
			for _, a := range snap.Actions() {
				if a.GetVerb() == "delete" {
					if !slices.Contains(deletedWith(t, snap, tc.content), protocol.ContentBoundFinalizer) {
						t.Error("content deleted without its bound-protection finalizer")
					}
				}
			}
		})
	}
}

// deletedWith is the finalizers content held when it was deleted: the fake clientset
// keeps nothing, so they are the ones of its last patch (or of the object it started with).
func deletedWith(t *testing.T, snap *snapfake.Clientset, content *snapshotv1.VolumeSnapshotContent) []string {
	finalizers := content.Finalizers
	for _, a := range snap.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetName() == content.Name {
			var patch struct {
				Metadata struct {
					Finalizers *[]string `json:"finalizers"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(p.GetPatch(), &patch); err != nil {
				t.Fatal(err)
			}
			if patch.Metadata.Finalizers != nil {
				finalizers = *patch.Metadata.Finalizers
			}
		}
	}
	return finalizers
}

// TestReleaseGoneContent: a content that is gone by the time it is released is no error.
func TestReleaseGoneContent(t *testing.T) {
	c, _, _, _ := testController(t)
	if err := c.singles.release(context.Background(), newContent("gone", readyContent), true); err != nil {
		t.Errorf("release of a content that is gone: %v", err)
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
