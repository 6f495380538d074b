package snapshot

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

func TestStateMetrics(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	named := func(name string, age time.Duration) func(*snapshotv1.VolumeSnapshot) {
		return func(vs *snapshotv1.VolumeSnapshot) {
			vs.Name, vs.UID = name, types.UID(name+"-uid")
			vs.CreationTimestamp = metav1.NewTime(now.Add(-age))
		}
	}
	other := newClass("gold", false, nil)
	other.Driver = "other.example.com"
	failedMsg := "boom"
	objs := []runtime.Object{
		newSnapshot(named("ready", time.Hour), boundTo("c-ready"), func(vs *snapshotv1.VolumeSnapshot) { vs.Status.ReadyToUse = ptr.To(true) }),
		newContent("c-ready", readyContent),
		newSnapshot(named("gold", 10*time.Minute), func(vs *snapshotv1.VolumeSnapshot) { vs.Spec.VolumeSnapshotClassName = ptr.To("gold") }),
		other,
		newSnapshot(named("failed", 20*time.Minute), boundTo("c-failed"), func(vs *snapshotv1.VolumeSnapshot) {
			vs.Status.Error = &snapshotv1.VolumeSnapshotError{Message: &failedMsg}
		}),
		newContent("c-failed"),
		newSnapshot(named("gone", time.Hour), deleting, func(vs *snapshotv1.VolumeSnapshot) {
			vs.DeletionTimestamp = ptr.To(metav1.NewTime(now.Add(-3 * time.Minute)))
		}),
		newSnapshot(named("new", 30*time.Second), boundTo("c-new")),
		newContent("c-new"),
	}
	c, _, _, _ := testController(t, objs...)
	setClock(c, clocktesting.NewFakePassiveClock(now))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newStateMetrics(c))
	want := `
# HELP shutter_snapshot_oldest_age_seconds Age of the oldest pending or failed VolumeSnapshot (since creation) and of the oldest deleting one (since deletion), by driver.
# TYPE shutter_snapshot_oldest_age_seconds gauge
shutter_snapshot_oldest_age_seconds{driver="d.example.com",state="failed"} 1200
shutter_snapshot_oldest_age_seconds{driver="d.example.com",state="pending"} 30
shutter_snapshot_oldest_age_seconds{driver="other.example.com",state="pending"} 600
shutter_snapshot_oldest_age_seconds{driver="unknown",state="deleting"} 180
# HELP shutter_snapshots VolumeSnapshots by driver and state (pending, ready, failed, deleting).
# TYPE shutter_snapshots gauge
shutter_snapshots{driver="d.example.com",state="deleting"} 0
shutter_snapshots{driver="d.example.com",state="failed"} 1
shutter_snapshots{driver="d.example.com",state="pending"} 1
shutter_snapshots{driver="d.example.com",state="ready"} 1
shutter_snapshots{driver="other.example.com",state="deleting"} 0
shutter_snapshots{driver="other.example.com",state="failed"} 0
shutter_snapshots{driver="other.example.com",state="pending"} 1
shutter_snapshots{driver="other.example.com",state="ready"} 0
shutter_snapshots{driver="unknown",state="deleting"} 1
shutter_snapshots{driver="unknown",state="failed"} 0
shutter_snapshots{driver="unknown",state="pending"} 0
shutter_snapshots{driver="unknown",state="ready"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
