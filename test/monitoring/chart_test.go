package monitoring

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestChartRenders renders the chart with both switches on and checks that the PrometheusRule
// holds the rules file and the ConfigMap the dashboard, with the Grafana sidecar's label; with
// the defaults, neither is rendered.
func TestChartRenders(t *testing.T) {
	if testing.Short() {
		t.Skip("builds helm; skipped with -short")
	}
	out, err := exec.Command(filepath.Join("..", "..", "hack", "build-tools.sh"), "helm").Output()
	if err != nil {
		t.Fatalf("hack/build-tools.sh helm: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	helm := filepath.Join(lines[len(lines)-1], "helm")
	render := func(args ...string) []map[string]any {
		cmd := exec.Command(helm, append([]string{"template", "shutter", chartDir, "--namespace", "shutter-system"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		data, err := cmd.Output()
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, stderr.String())
		}
		var docs []map[string]any
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc map[string]any
			if dec.Decode(&doc) != nil {
				break
			}
			if doc != nil {
				docs = append(docs, doc)
			}
		}
		return docs
	}
	find := func(docs []map[string]any, kind, suffix string) map[string]any {
		for _, d := range docs {
			name, _ := d["metadata"].(map[string]any)["name"].(string)
			if d["kind"] == kind && strings.HasSuffix(name, suffix) {
				return d
			}
		}
		return nil
	}
	defaults := render()
	if find(defaults, "PrometheusRule", "") != nil || find(defaults, "ConfigMap", "-dashboard") != nil {
		t.Error("the default values render monitoring objects")
	}
	docs := render("--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true",
		"--set", "monitoring.prometheusRule.labels.release=kube-prometheus")
	rule := find(docs, "PrometheusRule", "")
	if rule == nil {
		t.Fatal("no PrometheusRule")
	}
	var want map[string]any
	data, _ := os.ReadFile(rulesFile)
	if err := yaml.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rule["spec"], want) {
		t.Error("the PrometheusRule's spec differs from files/prometheus-rules.yaml")
	}
	if rule["metadata"].(map[string]any)["labels"].(map[string]any)["release"] != "kube-prometheus" {
		t.Error("the PrometheusRule lacks monitoring.prometheusRule.labels")
	}
	cm := find(docs, "ConfigMap", "-dashboard")
	if cm == nil {
		t.Fatal("no dashboard ConfigMap")
	}
	if cm["metadata"].(map[string]any)["labels"].(map[string]any)["grafana_dashboard"] != "1" {
		t.Error(`the dashboard ConfigMap lacks the label grafana_dashboard: "1"`)
	}
	var got, file any
	dash, _ := os.ReadFile(dashboard)
	if err := json.Unmarshal([]byte(cm["data"].(map[string]any)["shutter-snapshots.json"].(string)), &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(dash, &file)
	if !reflect.DeepEqual(got, file) {
		t.Error("the ConfigMap's dashboard differs from files/grafana-dashboard.json")
	}
}
