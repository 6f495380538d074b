package dropin

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

// TestUpstreamRBAC runs both binaries with the tokens of upstream's ServiceAccounts, bound only
// by upstream's RBAC files, through a snapshot and a group snapshot lifecycle. Nothing may be
// refused: the features that need more rights (the sidecar liveness check, SnapshotSchedules,
// the sidecar's server-side driver filter) turn themselves off with one warning each. Then both
// /metrics are scraped for upstream's metric names and labels.
func TestUpstreamRBAC(t *testing.T) {
	setUp(t)
	ctrlAddr, sideAddr := freeAddress(t), freeAddress(t)
	ctrl := component(t, "snapshot-controller", "rbac-snapshot-controller", controllerArgs(ctrlAddr)...)
	side := component(t, "csi-snapshotter", "rbac-csi-snapshotter", sidecarArgs(sideAddr)...)
	waitServing(t, ctrl, "http://"+ctrlAddr+"/healthz")
	waitServing(t, side, "http://"+sideAddr+"/healthz")
	// The sidecar leads on upstream's Lease, so swapping images in a Deployment keeps one leader.
	upstreamLease := "external-snapshotter-leader-" + strings.ReplaceAll(driver, ".", "-")
	testenv.WaitFor(t, "the sidecar to hold "+upstreamLease, readyTimeout, func(ctx context.Context) (*coordinationv1.Lease, error) {
		return suite.kube.CoordinationV1().Leases(sidecarNS).Get(ctx, upstreamLease, metav1.GetOptions{})
	}, func(l *coordinationv1.Lease) bool {
		return l != nil && ptr.Deref(l.Spec.HolderIdentity, "") != ""
	})
	ns := testenv.Namespace(t, suite.kube)
	snapshotLifecycle(t, ns)
	groupLifecycle(t, ns)

	for _, p := range []*stack.Process{ctrl, side} {
		if lines := forbidden(t, p); len(lines) > 0 {
			t.Errorf("%s was refused under upstream's RBAC:\n%s", p.Name, strings.Join(lines, "\n"))
		}
	}
	for _, w := range []struct {
		p    *stack.Process
		line string
	}{
		{ctrl, "The sidecar liveness check (--sidecar-liveness-threshold) is turned off: this component's RBAC role lacks [list leases"},
		{ctrl, "SnapshotSchedules (--snapshot-schedules) is turned off: this component's RBAC role lacks [list snapshotschedules"},
		{ctrl, "Writing claim finalizers with get and update"},
		{side, "Watching only this driver's contents on the server side (a spec.driver field selector) is turned off: this component's RBAC role lacks [get customresourcedefinitions"},
	} {
		if n := count(t, w.p, w.line); n != 1 {
			t.Errorf("%s logged %q %d times, want once", w.p.Name, w.line, n)
		}
	}
	t.Run("metrics", func(t *testing.T) {
		checkMetrics(t, "snapshot-controller", scrape(t, "http://"+ctrlAddr+"/metrics"), controllerMetrics)
		checkMetrics(t, "csi-snapshotter", scrape(t, "http://"+sideAddr+"/metrics"), sidecarMetrics)
		ops := labelValues(scrape(t, "http://"+ctrlAddr+"/metrics"), "snapshot_controller_operation_total_seconds", "operation_name")
		for _, op := range []string{"CreateSnapshot", "CreateSnapshotAndReady", "DeleteSnapshot",
			"CreateGroupSnapshot", "CreateGroupSnapshotAndReady", "DeleteGroupSnapshot"} {
			if !slices.Contains(ops, op) {
				t.Errorf("snapshot_controller_operation_total_seconds has no operation_name=%q after a lifecycle (has %q)", op, ops)
			}
		}
	})
}

// The upstream images' metric families and their labels (external-snapshotter v8.7.0
// pkg/metrics, csi-lib-utils v0.25.0 metrics, component-base v0.37 workqueue and leader election
// metrics); histogram families also have le on their buckets.
var (
	// clientGoMetrics are served by both.
	clientGoMetrics = map[string][]string{
		"process_start_time_seconds":                  nil,
		"workqueue_depth":                             {"name"},
		"workqueue_adds_total":                        {"name"},
		"workqueue_queue_duration_seconds":            {"name"},
		"workqueue_work_duration_seconds":             {"name"},
		"workqueue_unfinished_work_seconds":           {"name"},
		"workqueue_longest_running_processor_seconds": {"name"},
		"workqueue_retries_total":                     {"name"},
		"leader_election_master_status":               {"name"},
	}
	controllerMetrics = with(clientGoMetrics, map[string][]string{
		"snapshot_controller_operation_total_seconds": {"driver_name", "operation_name", "operation_status", "snapshot_type"},
		"snapshot_controller_operations_in_flight":    nil,
	})
	sidecarMetrics = with(clientGoMetrics, map[string][]string{
		"csi_sidecar_operations_seconds": {"driver_name", "grpc_status_code", "method_name"},
	})
)

func with(a, b map[string][]string) map[string][]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return families
}

// checkMetrics checks that every family of want is served with a series whose label names are
// exactly want's.
func checkMetrics(t *testing.T, component string, got map[string]*dto.MetricFamily, want map[string][]string) {
	t.Helper()
	for name, labels := range want {
		f, ok := got[name]
		if !ok || len(f.GetMetric()) == 0 {
			t.Errorf("%s serves no %s", component, name)
			continue
		}
		var names []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			names = append(names, l.GetName())
		}
		sort.Strings(names)
		if !slices.Equal(names, labels) {
			t.Errorf("%s: %s has labels %q, want %q", component, name, names, labels)
		}
	}
}

func labelValues(families map[string]*dto.MetricFamily, name, label string) []string {
	var out []string
	for _, m := range families[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && !slices.Contains(out, l.GetValue()) {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

// TestJSONLogging: with --logging-format=json every line both binaries write is one JSON object,
// and a removed flag (--logtostderr) is reported once, as one of those objects.
func TestJSONLogging(t *testing.T) {
	setUp(t)
	for _, c := range []struct{ binary, addr string }{{"snapshot-controller", freeAddress(t)}, {"csi-snapshotter", freeAddress(t)}} {
		args := sidecarArgs(c.addr, "--logging-format=json", "--logtostderr", "--logtostderr=true", "--v=4")
		if c.binary == "snapshot-controller" {
			args = controllerArgs(c.addr, "--logging-format=json", "--logtostderr", "--logtostderr=true", "--v=4")
		}
		p := component(t, c.binary, "json-"+c.binary, args...)
		waitServing(t, p, "http://"+c.addr+"/healthz")
		p.Stop(10 * time.Second)
		lines := logLines(t, p)
		if len(lines) < 3 {
			t.Fatalf("%s wrote %d lines", c.binary, len(lines))
		}
		deprecated := 0
		for _, l := range lines {
			var obj map[string]any
			if err := json.Unmarshal([]byte(l), &obj); err != nil {
				t.Errorf("%s: not one JSON object: %q: %v", c.binary, l, err)
				continue
			}
			if msg, _ := obj["msg"].(string); strings.Contains(msg, "--logtostderr is deprecated") {
				deprecated++
			}
		}
		if deprecated != 1 {
			t.Errorf("%s: %d deprecation warnings for --logtostderr, want 1", c.binary, deprecated)
		}
	}
}
