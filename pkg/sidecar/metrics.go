package sidecar

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shutter-csi/shutter/pkg/csi"
	names "github.com/shutter-csi/shutter/pkg/metrics"
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
			Namespace: names.Namespace, Subsystem: names.SidecarSubsystem, Name: names.SidecarOperations,
			Help: "CSI snapshot operations by kind, operation and outcome (Succeeded, Failed, InProgress).",
		}, []string{names.LabelKind, names.LabelOperation, names.LabelOutcome}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: names.Namespace, Subsystem: names.SidecarSubsystem, Name: names.SidecarOperationSeconds,
			Help:    "Duration of CSI snapshot operations by kind and operation.",
			Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300},
		}, []string{names.LabelKind, names.LabelOperation}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: names.Namespace, Subsystem: names.SidecarSubsystem, Name: names.SidecarAPIWrites,
			Help: "Writes to the API server by kind, what was written (metadata or status) and result.",
		}, []string{names.LabelKind, names.LabelWrite, names.LabelResult}),
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
	result := names.ResultOK
	if err != nil {
		result = names.ResultError
	}
	m.writes.WithLabelValues(kind, what, result).Inc()
}
