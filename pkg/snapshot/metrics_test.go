package snapshot

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/metrics"
)

func TestGauges(t *testing.T) {
	ready := newSnapshot(func(vs *snapshotv1.VolumeSnapshot) {
		vs.Name, vs.Status = "ready", &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
	})
	failed := newSnapshot(func(vs *snapshotv1.VolumeSnapshot) {
		vs.Name, vs.Status = "failed", &snapshotv1.VolumeSnapshotStatus{Error: &snapshotv1.VolumeSnapshotError{}}
	})
	gone := newSnapshot(deleting, func(vs *snapshotv1.VolumeSnapshot) { vs.Name = "gone" })
	pending := newSnapshot(func(vs *snapshotv1.VolumeSnapshot) { vs.Name = "pending" })
	c, _, _, _ := testController(t, ready, failed, gone, pending)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newGauges(c))
	want := `
# HELP shutter_snapshots_being_deleted VolumeSnapshots being deleted.
# TYPE shutter_snapshots_being_deleted gauge
shutter_snapshots_being_deleted 1
# HELP shutter_snapshots_failed VolumeSnapshots whose status carries an error.
# TYPE shutter_snapshots_failed gauge
shutter_snapshots_failed 1
# HELP shutter_snapshots_not_ready VolumeSnapshots that are not ready to use yet.
# TYPE shutter_snapshots_not_ready gauge
shutter_snapshots_not_ready 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// TestWorkqueueMetricsAreNamed checks that the queues report under their names once the
// provider is registered, as /metrics serves them.
func TestWorkqueueMetricsAreNamed(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.RegisterWorkqueue(reg)
	q := controller.NewQueue("metrics-test", controller.Options{}, func(context.Context, string) error { return nil })
	q.Add("k")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	q.Run(ctx, 1)
	n, err := testutil.GatherAndCount(reg, "shutter_workqueue_adds_total")
	if err != nil || n == 0 {
		t.Fatalf("no named workqueue metrics: %d, %v", n, err)
	}
	families, _ := reg.Gather()
	found := false
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == "name" && l.GetValue() == "metrics-test")
			}
		}
	}
	if !found {
		t.Error("no metric carries the queue's name")
	}
}
