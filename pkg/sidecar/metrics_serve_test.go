package sidecar

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	csimetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shutter-csi/shutter/pkg/app"
)

// TestMetricsEndpointServes: /metrics answers 200 with the Go runtime's, the queues' and the
// CSI calls' metrics. The soak found it answering 500 on every scrape: csi-lib-utils' registry
// and the component's both carried process_start_time_seconds, with two help texts.
func TestMetricsEndpointServes(t *testing.T) {
	reg := app.Registry()
	newMetrics(reg)
	csiMetrics := csimetrics.NewCSIMetricsManagerForSidecar("")
	csiMetrics.RecordMetrics("/csi.v1.Controller/CreateSnapshot", nil, time.Second)
	srv := httptest.NewServer(promhttp.HandlerFor(gatherer(reg, csiMetrics.GetRegistry()), promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics answered %d: %s", resp.StatusCode, body)
	}
	for _, want := range []string{"\ngo_goroutines ", "\nprocess_start_time_seconds ", "csi_sidecar_operations_seconds"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
