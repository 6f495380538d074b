// Package monitoring checks the chart's alerts and Grafana dashboard without a Prometheus server:
// every expression is parsed with Prometheus' own parser and names only metrics Shutter's
// components export, and every alert fires on recorded series evaluated by the PromQL engine.
// It is a module of its own so that Prometheus' many dependencies stay out of Shutter's.
package monitoring

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

var (
	chartDir   = filepath.Join("..", "..", "deploy", "helm", "shutter")
	rulesFile  = filepath.Join(chartDir, "files", "prometheus-rules.yaml")
	dashboard  = filepath.Join(chartDir, "files", "grafana-dashboard.json")
	promParser = parser.NewParser(parser.Options{})
)

// exported are the metrics Shutter's components export: pkg/metrics (snapshot-controller and the
// workqueues of both components, the hostpath driver's), pkg/snapshot's collectors,
// pkg/sidecar/metrics.go, and the CSI call histogram of csi-lib-utils in the sidecar. Histograms appear with their series suffixes.
var exported = names(
	"shutter_operation_duration_seconds_bucket", "shutter_operation_duration_seconds_count", "shutter_operation_duration_seconds_sum",
	"shutter_snapshots_not_ready", "shutter_snapshots_failed", "shutter_snapshots_being_deleted",
	"shutter_snapshots", "shutter_group_snapshots", "shutter_snapshot_oldest_age_seconds", "shutter_group_snapshot_oldest_age_seconds",
	"shutter_snapshot_contents_without_sidecar", "shutter_controller_api_writes_total",
	"shutter_workqueue_depth", "shutter_workqueue_adds_total", "shutter_workqueue_retries_total",
	"shutter_workqueue_queue_duration_seconds_bucket", "shutter_workqueue_work_duration_seconds_bucket",
	"shutter_workqueue_unfinished_work_seconds", "shutter_workqueue_longest_running_processor_seconds", "shutter_reconcile_total",
	"shutter_snapshotter_operations_total", "shutter_snapshotter_api_writes_total",
	"shutter_snapshotter_operation_duration_seconds_bucket", "shutter_snapshotter_operation_duration_seconds_count",
	"csi_sidecar_operations_seconds_bucket", "csi_sidecar_operations_seconds_count", "csi_sidecar_operations_seconds_sum",
	"shutter_hostpath_quarantined_total", "shutter_hostpath_quarantine_bytes", "shutter_hostpath_cleanup_halted",
)

func names(list ...string) map[string]bool {
	out := map[string]bool{}
	for _, n := range list {
		out[n] = true
	}
	return out
}

// loadRules parses and validates the rules file as Prometheus loads it.
func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(data, false, model.UTF8Validation, promParser, nil)
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	return groups
}

// checkExpr parses expr and checks that every metric it selects is exported.
func checkExpr(t *testing.T, where, expr string) {
	t.Helper()
	e, err := promParser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, expr)
		return
	}
	selected := 0
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		for _, name := range selectedNames(vs) {
			selected++
			if !exported[name] {
				t.Errorf("%s: selects %q, which no Shutter component exports", where, name)
			}
		}
		return nil
	})
	if selected == 0 {
		t.Errorf("%s: selects no metric by name: %s", where, expr)
	}
}

// selectedNames are the metric names a selector can match: its name, or the alternatives of an
// equality or a plain alternation on __name__.
func selectedNames(vs *parser.VectorSelector) []string {
	if vs.Name != "" {
		return []string{vs.Name}
	}
	for _, m := range vs.LabelMatchers {
		if m.Name != labels.MetricName {
			continue
		}
		switch m.Type {
		case labels.MatchEqual:
			return []string{m.Value}
		case labels.MatchRegexp:
			if regexp.MustCompile(`^[a-z_|]+$`).MatchString(m.Value) {
				return strings.Split(m.Value, "|")
			}
		}
	}
	return nil
}

func TestRulesParse(t *testing.T) {
	want := []string{"ShutterSnapshotNotReady", "ShutterSnapshotDeletionStuck", "ShutterNoControllerLeader",
		"ShutterNoSidecarForDriver", "ShutterCSIErrorRatioHigh", "ShutterHostpathQuarantineNotEmpty"}
	var got []string
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			got = append(got, r.Alert)
			checkExpr(t, r.Alert, r.Expr)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs a severity, a summary and a description", r.Alert)
			}
			anchor := strings.ToLower(r.Alert)
			if !strings.HasSuffix(r.Annotations["runbook_url"], "/deploy/helm/shutter/README.md#"+anchor) {
				t.Errorf("%s: runbook_url %q does not point at the chart README's section", r.Alert, r.Annotations["runbook_url"])
			}
			if !strings.Contains(string(readme), "\n### "+r.Alert+"\n") {
				t.Errorf("%s: the chart README has no runbook section \"### %s\"", r.Alert, r.Alert)
			}
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("alerts %v, want %v", got, want)
	}
}

// grafanaPanel is the part of a Grafana panel the test reads.
type grafanaPanel struct {
	Title   string         `json:"title"`
	Type    string         `json:"type"`
	Panels  []grafanaPanel `json:"panels"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

func TestDashboardParses(t *testing.T) {
	data, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string         `json:"title"`
		UID    string         `json:"uid"`
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" {
		t.Error("the dashboard needs a title and a uid")
	}
	exprs := 0
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, target := range p.Targets {
				exprs++
				checkExpr(t, p.Title+" "+target.RefID, target.Expr)
			}
		}
	}
	walk(d.Panels)
	// Throughput, latency, queue depth, errors by code and stuck counts, each at least once.
	for _, metric := range []string{"shutter_operation_duration_seconds_count", "shutter_operation_duration_seconds_bucket",
		"shutter_workqueue_depth", "grpc_status_code", "shutter_snapshots{", "shutter_snapshot_oldest_age_seconds"} {
		if !strings.Contains(string(data), metric) {
			t.Errorf("no panel uses %s", metric)
		}
	}
	t.Logf("%d expressions in %d top-level panels", exprs, len(d.Panels))
}
