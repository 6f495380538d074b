package sidecar

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shutter-csi/shutter/pkg/csi"
)

// Metric names and labels: every metric the sidecar exports is named here.
const (
	metricsNamespace = "shutter"
	metricsSubsystem = "snapshotter"

	metricOperations       = "operations_total"
	metricOperationSeconds = "operation_duration_seconds"
	metricAPIWrites        = "api_writes_total"

	labelKind      = "kind"
	labelOperation = "operation"
	labelOutcome   = "outcome"
	labelWrite     = "write"
	labelResult    = "result"

	resultOK    = "ok"
	resultError = "error"
)

// metrics are the sidecar's own metrics (the CSI RPC metrics come from csi-lib-utils).
type metrics struct {
	operations *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
	writes     *prometheus.CounterVec
}

// newMetrics makes the metrics and registers them with reg, when given.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: metricOperations,
			Help: "CSI snapshot operations by kind, operation and outcome (Succeeded, Failed, InProgress).",
		}, []string{labelKind, labelOperation, labelOutcome}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: metricOperationSeconds,
			Help:    "Duration of CSI snapshot operations by kind and operation.",
			Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300},
		}, []string{labelKind, labelOperation}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: metricAPIWrites,
			Help: "Writes to the API server by kind, what was written (metadata or status) and result.",
		}, []string{labelKind, labelWrite, labelResult}),
	}
	if reg != nil {
		reg.MustRegister(m.operations, m.seconds, m.writes)
	}
	return m
}

func (m *metrics) operation(kind, op string, outcome csi.Outcome, d time.Duration) {
	m.operations.WithLabelValues(kind, op, outcome.String()).Inc()
	m.seconds.WithLabelValues(kind, op).Observe(d.Seconds())
}

func (m *metrics) write(kind, what string, err error) {
	result := resultOK
	if err != nil {
		result = resultError
	}
	m.writes.WithLabelValues(kind, what, result).Inc()
}
