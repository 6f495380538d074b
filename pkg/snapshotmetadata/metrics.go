package snapshotmetadata

import (
	"strings"
	"time"

	csimetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/status"

	names "github.com/shutter-csi/shutter/pkg/metrics"
)

// Metrics are the sidecar's metrics. A nil *Metrics records nothing.
type Metrics struct {
	// CSI is upstream's operations histogram (snapshot_metadata_controller_operations_seconds),
	// which the driver connection's calls are recorded in as well.
	CSI     csimetrics.CSIMetricsManager
	calls   *prometheus.CounterVec
	active  *prometheus.GaugeVec
	ranges  *prometheus.CounterVec
	covered *prometheus.CounterVec
}

// NewMetrics makes the metrics and registers Shutter's own with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: names.Namespace, Subsystem: names.SnapshotMetadataSubsystem, Name: name, Help: help}
	}
	op := []string{names.LabelOperation}
	m := &Metrics{
		CSI: csimetrics.NewCSIMetricsManagerWithOptions("",
			csimetrics.WithSubsystem(names.SnapshotMetadataUpstreamSubsystem),
			csimetrics.WithLabelNames(names.LabelTargetSnapshot, names.LabelBaseSnapshot),
			csimetrics.WithProcessStartTime(false)),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts(opts(names.SnapshotMetadataCalls,
			"Calls of the Kubernetes SnapshotMetadata service by operation and gRPC code.")), []string{names.LabelOperation, names.LabelCode}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts(names.SnapshotMetadataActive,
			"Calls being served by operation.")), op),
		ranges: prometheus.NewCounterVec(prometheus.CounterOpts(opts(names.SnapshotMetadataRanges,
			"Block ranges relayed to clients by operation.")), op),
		covered: prometheus.NewCounterVec(prometheus.CounterOpts(opts(names.SnapshotMetadataCovered,
			"Bytes covered by the block ranges relayed to clients, by operation.")), op),
	}
	reg.MustRegister(m.calls, m.active, m.ranges, m.covered)
	return m
}

func (m *Metrics) started(op string) {
	if m != nil {
		m.active.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) done(op, target, base string, sent *relayed, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.active.WithLabelValues(op).Dec()
	m.calls.WithLabelValues(op, status.Code(err).String()).Inc()
	m.ranges.WithLabelValues(op).Add(float64(sent.ranges.Load()))
	m.covered.WithLabelValues(op).Add(float64(sent.covered.Load()))
	labelled, lerr := m.CSI.WithLabelValues(map[string]string{names.LabelTargetSnapshot: target, names.LabelBaseSnapshot: base})
	if lerr == nil {
		labelled.RecordMetrics(op, err, d)
	}
}

// Gatherer serves reg and, of csi-lib-utils' registry, upstream's histogram only.
func (m *Metrics) Gatherer(reg prometheus.Gatherer) prometheus.Gatherer {
	prefix := names.SnapshotMetadataUpstreamSubsystem + "_"
	return prometheus.Gatherers{reg, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		families, err := m.CSI.GetRegistry().Gather()
		out := families[:0]
		for _, f := range families {
			if strings.HasPrefix(f.GetName(), prefix) {
				out = append(out, f)
			}
		}
		return out, err
	})}
}
