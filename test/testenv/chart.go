package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Rendered is `helm template` of the chart: each document by "Kind/name" (the first of that kind
// and name) and by "Kind/namespace/name".
type Rendered map[string][]byte

// ChartDir is the repository's Helm chart.
func ChartDir() string { return filepath.Join(RepoRoot(), "deploy", "helm", "shutter") }

// RenderChart runs `helm template shutter` of the chart with the helm binary helm, as release
// namespace namespace, with args (--set, -f ...), and returns its documents.
func RenderChart(t testing.TB, helm, namespace string, args ...string) Rendered {
	t.Helper()
	cmd := exec.Command(helm, append([]string{"template", "shutter", ChartDir(), "-n", namespace}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	docs := Rendered{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var head struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if head.Kind == "" {
			continue
		}
		if _, ok := docs[head.Kind+"/"+head.Metadata.Name]; !ok {
			docs[head.Kind+"/"+head.Metadata.Name] = []byte(doc)
		}
		docs[head.Kind+"/"+head.Metadata.Namespace+"/"+head.Metadata.Name] = []byte(doc)
	}
	return docs
}

// Decode decodes the document of key into into; false when there is none.
func (r Rendered) Decode(t testing.TB, key string, into any) bool {
	t.Helper()
	doc, ok := r[key]
	if !ok {
		return false
	}
	if err := yaml.Unmarshal(doc, into); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return true
}
