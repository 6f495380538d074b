package monitoring

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// TestAlertsFire evaluates each alert, every 30 seconds as Prometheus would, over recorded series
// and checks when it fires and with which labels.
func TestAlertsFire(t *testing.T) {
	tests := []struct {
		name  string
		alert string
		// series are promqltest "load 30s" lines: one sample per 30 seconds from time 0.
		series string
		// quiet is a time at which the alert must not fire yet; firing one at which it must.
		quiet, firing time.Duration
		// want are labels of the firing alert; nil means it must not fire at all.
		want map[string]string
	}{
		{name: "a snapshot pending for 17 minutes", alert: "ShutterSnapshotNotReady",
			series: `shutter_snapshot_oldest_age_seconds{driver="d.example.com", state="pending"} 0+30x60
			         shutter_snapshot_oldest_age_seconds{driver="d.example.com", state="deleting"} 0+30x60`,
			quiet: 15 * time.Minute, firing: 17 * time.Minute, want: map[string]string{"driver": "d.example.com", "severity": "warning"}},
		{name: "a group snapshot failed 17 minutes ago", alert: "ShutterSnapshotNotReady",
			series: `shutter_group_snapshot_oldest_age_seconds{driver="g.example.com", state="failed"} 0+30x60`,
			quiet:  15 * time.Minute, firing: 17 * time.Minute, want: map[string]string{"driver": "g.example.com"}},
		{name: "snapshots ready long ago never fire", alert: "ShutterSnapshotNotReady",
			series: `shutter_snapshots{driver="d.example.com", state="ready"} 5x60`, quiet: 29 * time.Minute},
		{name: "a deletion stuck for 17 minutes", alert: "ShutterSnapshotDeletionStuck",
			series: `shutter_snapshot_oldest_age_seconds{driver="d.example.com", state="deleting"} 0+30x60`,
			quiet:  15 * time.Minute, firing: 17 * time.Minute, want: map[string]string{"driver": "d.example.com", "severity": "warning"}},
		{name: "a pending snapshot is no stuck deletion", alert: "ShutterSnapshotDeletionStuck",
			series: `shutter_snapshot_oldest_age_seconds{driver="d.example.com", state="pending"} 0+30x60`, quiet: 29 * time.Minute},
		{name: "the leader's gauges vanish at 5m", alert: "ShutterNoControllerLeader",
			// The last sample is at 5m; it stays visible for the 5m lookback, then absent() holds for 5m.
			series: `shutter_snapshots_not_ready 0x10`,
			quiet:  14 * time.Minute, firing: 16 * time.Minute, want: map[string]string{"severity": "critical"}},
		{name: "a leader keeps reporting", alert: "ShutterNoControllerLeader",
			series: `shutter_snapshots_not_ready 3x60`, quiet: 29 * time.Minute},
		{name: "contents wait for a dead sidecar from 2.5m", alert: "ShutterNoSidecarForDriver",
			series: `shutter_snapshot_contents_without_sidecar{driver="d.example.com"} 0x4 2x20`,
			quiet:  3 * time.Minute, firing: 4 * time.Minute, want: map[string]string{"driver": "d.example.com", "severity": "critical"}},
		{name: "a third of CreateSnapshot calls fail", alert: "ShutterCSIErrorRatioHigh",
			series: `csi_sidecar_operations_seconds_count{driver_name="d.example.com", method_name="/csi.v1.Controller/CreateSnapshot", grpc_status_code="OK"} 0+10x100
			         csi_sidecar_operations_seconds_count{driver_name="d.example.com", method_name="/csi.v1.Controller/CreateSnapshot", grpc_status_code="Internal"} 0+5x100`,
			quiet: 10 * time.Minute, firing: 20 * time.Minute,
			want: map[string]string{"driver_name": "d.example.com", "method_name": "/csi.v1.Controller/CreateSnapshot", "severity": "warning"}},
		{name: "one failure in twenty-one is below the ratio", alert: "ShutterCSIErrorRatioHigh",
			series: `csi_sidecar_operations_seconds_count{driver_name="d.example.com", method_name="/csi.v1.Controller/CreateSnapshot", grpc_status_code="OK"} 0+10x100
			         csi_sidecar_operations_seconds_count{driver_name="d.example.com", method_name="/csi.v1.Controller/CreateSnapshot", grpc_status_code="Internal"} 0+0.5x100`,
			quiet: 49 * time.Minute},
		{name: "4 MiB quarantined from 5m", alert: "ShutterHostpathQuarantineNotEmpty",
			series: `shutter_hostpath_quarantine_bytes{instance="127.0.0.1:8083"} 0x10 4194304x60`,
			quiet:  19 * time.Minute, firing: 21 * time.Minute, want: map[string]string{"instance": "127.0.0.1:8083", "severity": "warning"}},
		{name: "an empty quarantine never fires", alert: "ShutterHostpathQuarantineNotEmpty",
			series: `shutter_hostpath_quarantine_bytes{instance="127.0.0.1:8083"} 0x60`, quiet: 29 * time.Minute},
	}
	groups := loadRules(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rule *rules.AlertingRule
			for _, g := range groups.Groups {
				for _, r := range g.Rules {
					if r.Alert == tc.alert {
						expr, err := promParser.ParseExpr(r.Expr)
						if err != nil {
							t.Fatal(err)
						}
						rule = rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), 0, labels.FromMap(r.Labels),
							labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, nil)
					}
				}
			}
			if rule == nil {
				t.Fatalf("no alert %s", tc.alert)
			}
			storage := promqltest.LoadedStorage(t, "load 30s\n"+tc.series)
			engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 1_000_000)
			query := rules.EngineQueryFunc(engine, storage)
			end := max(tc.quiet, tc.firing)
			for at := time.Duration(0); at <= end; at += 30 * time.Second {
				if _, err := rule.Eval(context.Background(), 0, time.Unix(0, 0).Add(at), query, nil, 0); err != nil {
					t.Fatal(err)
				}
				firing := firingAlerts(rule)
				switch {
				case at == tc.quiet && len(firing) > 0:
					t.Errorf("fires at %s already: %v", at, firing)
				case at == tc.firing && tc.want != nil:
					if len(firing) != 1 {
						t.Fatalf("at %s: %d firing alerts, want 1: %v", at, len(firing), firing)
					}
					for k, v := range tc.want {
						if got := firing[0].Get(k); got != v {
							t.Errorf("label %s=%q, want %q (alert %v)", k, got, v, firing[0])
						}
					}
				}
			}
		})
	}
}

func firingAlerts(rule *rules.AlertingRule) []labels.Labels {
	var out []labels.Labels
	for _, a := range rule.ActiveAlerts() {
		if a.State == rules.StateFiring {
			out = append(out, a.Labels)
		}
	}
	return out
}
