package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestReconcilesRegistered: the queues' outcome and panic counters are served with the
// workqueue metrics.
func TestReconcilesRegistered(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	RegisterWorkqueue(reg)
	Reconciles.WithLabelValues("metrics-test", ReconcileRequeueAfter).Inc()
	n, err := testutil.GatherAndCount(reg, "shutter_reconcile_total")
	if err != nil || n != 1 {
		t.Fatalf("shutter_reconcile_total series: %d, %v", n, err)
	}
	ReconcilePanics.WithLabelValues("metrics-test").Inc()
	if n, err := testutil.GatherAndCount(reg, "shutter_reconcile_panics_total"); err != nil || n != 1 {
		t.Fatalf("shutter_reconcile_panics_total series: %d, %v", n, err)
	}
}
