package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestConstructors: every constructor puts the metric under shutter_ with its help and labels.
func TestConstructors(t *testing.T) {
	vec := NewCounterVec("c_total", "help of c", "kind")
	vec.WithLabelValues("volume").Inc()
	for _, tc := range []struct {
		c    prometheus.Collector
		want string
	}{
		{NewCounter("a_total", "help of a"), `fqName: "shutter_a_total", help: "help of a", unit: "", constLabels: {}, variableLabels: {}}`},
		{vec, `fqName: "shutter_c_total", help: "help of c", unit: "", constLabels: {}, variableLabels: {kind}}`},
		{NewGauge("g", "help of g"), `fqName: "shutter_g", help: "help of g"`},
		{NewHistogram("h_seconds", "help of h", []float64{1, 2}), `fqName: "shutter_h_seconds", help: "help of h"`},
	} {
		ch := make(chan *prometheus.Desc, 1)
		tc.c.Describe(ch)
		if got := (<-ch).String(); !strings.Contains(got, tc.want) {
			t.Errorf("desc %s, want it to contain %s", got, tc.want)
		}
	}
	h := NewHistogram("h_seconds", "help of h", []float64{1, 2})
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	if b := m.GetHistogram().GetBucket(); len(b) != 2 || b[0].GetUpperBound() != 1 || b[1].GetUpperBound() != 2 {
		t.Errorf("buckets %v, want 1 and 2", b)
	}
}
