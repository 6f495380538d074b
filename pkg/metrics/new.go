package metrics

import "github.com/prometheus/client_golang/prometheus"

// NewCounter is the counter Namespace_name.
func NewCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help})
}

// NewCounterVec is the counter Namespace_name with the given labels.
func NewCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
}

// NewGauge is the gauge Namespace_name.
func NewGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help})
}

// NewHistogram is the histogram Namespace_name with the given bucket bounds.
func NewHistogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets})
}
