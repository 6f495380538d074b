package schedule

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

// TestSnapshotsOfUsesTheScheduleIndex: a schedule's snapshots come from the bySchedule index, the
// ones labelled with its name in its namespace only.
func TestSnapshotsOfUsesTheScheduleIndex(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{bySchedule: snapshotsBySchedule})
	snap := func(ns, name, schedule string) *snapshotv1.VolumeSnapshot {
		vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if schedule != "" {
			vs.Labels = map[string]string{schedulev1alpha1.LabelSchedule: schedule}
		}
		return vs
	}
	for _, vs := range []*snapshotv1.VolumeSnapshot{snap("a", "mine-1", "nightly"), snap("a", "mine-2", "nightly"),
		snap("a", "other", "weekly"), snap("b", "elsewhere", "nightly"), snap("a", "manual", "")} {
		if err := indexer.Add(vs); err != nil {
			t.Fatal(err)
		}
	}
	k := volumeSnapshots{indexer: indexer}
	got, err := k.snapshotsOf(&schedulev1alpha1.SnapshotSchedule{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "nightly"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, vs := range got {
		names = append(names, vs.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"mine-1", "mine-2"}) {
		t.Errorf("snapshots of a/nightly = %v, want [mine-1 mine-2]", names)
	}
}
