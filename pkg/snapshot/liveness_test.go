package snapshot

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

func TestSidecarLiveness(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// leaseIn is a Lease of namespace ns renewed renewedAgo (negative: in the future).
	leaseIn := func(ns, name string, renewedAgo time.Duration) *coordinationv1.Lease {
		renewed := metav1.NewMicroTime(now.Add(-renewedAgo))
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-0"), LeaseDurationSeconds: ptr.To(int32(15)), RenewTime: &renewed}}
	}
	// The driver's sidecar runs in driver-ns, whose ServiceAccount may write contents.
	lease := func(name string, renewedAgo time.Duration) *coordinationv1.Lease {
		return leaseIn("driver-ns", name, renewedAgo)
	}
	waited := func(d time.Duration) func(*snapshotv1.VolumeSnapshotContent) {
		return func(c *snapshotv1.VolumeSnapshotContent) { c.CreationTimestamp = metav1.NewTime(now.Add(-d)) }
	}
	deletedAgo := func(d time.Duration) func(*snapshotv1.VolumeSnapshotContent) {
		return func(c *snapshotv1.VolumeSnapshotContent) { c.DeletionTimestamp = ptr.To(metav1.NewTime(now.Add(-d))) }
	}
	tests := []struct {
		name    string
		content *snapshotv1.VolumeSnapshotContent
		leases  []*coordinationv1.Lease
		// wantEvent is a part of the Warning event's message, or "" for no event.
		wantEvent  string
		wantMetric string
	}{
		{name: "no lease", content: newContent("c", waited(10*time.Minute)),
			wantEvent:  "has waited 10m0s for the csi-snapshotter of driver d.example.com to create its backend snapshot",
			wantMetric: `shutter_snapshot_contents_without_sidecar{driver="d.example.com"} 1`},
		{name: "expired lease", content: newContent("c", waited(10*time.Minute)),
			leases:     []*coordinationv1.Lease{lease("shutter-snapshotter-d.example.com", 7*time.Minute)},
			wantEvent:  "no sidecar of that driver holds a live Lease (external-snapshotter-leader-d-example-com or shutter-snapshotter-d.example.com;",
			wantMetric: `shutter_snapshot_contents_without_sidecar{driver="d.example.com"} 1`},
		{name: "live sidecar of an older Shutter", content: newContent("c", waited(10*time.Minute)),
			leases:     []*coordinationv1.Lease{lease("shutter-snapshotter-d.example.com", 3*time.Second)},
			wantMetric: `shutter_snapshot_contents_without_sidecar{driver="d.example.com"} 0`},
		{name: "live sidecar (Shutter's or the reference)", content: newContent("c", waited(10*time.Minute)),
			leases:     []*coordinationv1.Lease{lease("external-snapshotter-leader-d-example-com", 3*time.Second)},
			wantMetric: `shutter_snapshot_contents_without_sidecar{driver="d.example.com"} 0`},
		{name: "waited less than the threshold", content: newContent("c", waited(time.Minute))},
		{name: "ready content", content: newContent("c", waited(10*time.Minute), readyContent)},
		{name: "a tenant's Lease in another namespace", content: newContent("c", waited(10*time.Minute)),
			leases:     []*coordinationv1.Lease{leaseIn("tenant", "shutter-snapshotter-d.example.com", 3*time.Second)},
			wantEvent:  "no sidecar of that driver holds a live Lease",
			wantMetric: `shutter_snapshot_contents_without_sidecar{driver="d.example.com"} 1`},
		{name: "renewed in 2099", content: newContent("c", waited(10*time.Minute)),
			leases:     []*coordinationv1.Lease{lease("shutter-snapshotter-d.example.com", now.Sub(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)))},
			wantEvent:  "no sidecar of that driver holds a live Lease",
			wantMetric: `shutter_snapshot_contents_without_sidecar{driver="d.example.com"} 1`},
		{name: "live sidecar in kube-system", content: newContent("c", waited(10*time.Minute)),
			leases:     []*coordinationv1.Lease{leaseIn("kube-system", "external-snapshotter-leader-d-example-com", 3*time.Second)},
			wantMetric: `shutter_snapshot_contents_without_sidecar{driver="d.example.com"} 0`},
		{name: "live sidecar in a namespace named by --sidecar-lease-namespaces", content: newContent("c", waited(10*time.Minute)),
			leases:     []*coordinationv1.Lease{leaseIn("named", "shutter-snapshotter-d.example.com", 3*time.Second)},
			wantMetric: `shutter_snapshot_contents_without_sidecar{driver="d.example.com"} 0`},
		{name: "deletion waits", content: newContent("c", waited(time.Hour), deletedAgo(6*time.Minute)),
			wantEvent:  "has waited 6m0s for the csi-snapshotter of driver d.example.com to delete its backend snapshot",
			wantMetric: `shutter_snapshot_contents_without_sidecar{driver="d.example.com"} 1`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, kube, _, recorder := testController(t, newSnapshot(boundTo("c")), tc.content)
			setClock(c, clocktesting.NewFakePassiveClock(now))
			for _, l := range tc.leases {
				if _, err := kube.CoordinationV1().Leases(l.Namespace).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, obj := range snapshotterRBAC("driver-ns") {
				if err := kube.Tracker().Add(obj); err != nil {
					t.Fatal(err)
				}
			}
			c.liveness = newLiveness(kube, 5*time.Minute, []string{"named"})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go c.liveness.informer.Run(ctx.Done())
			if !cache.WaitForCacheSync(ctx.Done(), c.liveness.informer.HasSynced) {
				t.Fatal("lease cache did not sync")
			}
			c.checkLiveness(ctx)
			c.checkLiveness(ctx) // a content is warned about once
			var events []string
			for len(recorder.Events) > 0 {
				events = append(events, <-recorder.Events)
			}
			switch {
			case tc.wantEvent == "" && len(events) > 0:
				t.Errorf("unexpected events %q", events)
			case tc.wantEvent != "" && (len(events) != 1 || !strings.Contains(events[0], "Warning "+ReasonNoSidecar+" ") || !strings.Contains(events[0], tc.wantEvent)):
				t.Errorf("events %q, want one %s event with %q", events, ReasonNoSidecar, tc.wantEvent)
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(livenessMetrics{c})
			if got := gatherLine(t, reg); got != tc.wantMetric {
				t.Errorf("metric %q, want %q", got, tc.wantMetric)
			}
		})
	}
}

// snapshotterRBAC lets the ServiceAccount csi-snapshotter of ns write contents' status, as a
// sidecar's ClusterRoleBinding does.
func snapshotterRBAC(ns string) []runtime.Object {
	return []runtime.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "snapshotter"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshotcontents/status"}, Verbs: []string{"update", "patch"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "snapshotter"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "snapshotter"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "csi-snapshotter", Namespace: ns}}},
	}
}

// gatherLine returns the one sample reg holds as `name{labels} value`, or "" when it has none.
func gatherLine(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %g", f.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	return strings.Join(lines, "\n")
}
