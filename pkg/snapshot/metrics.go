package snapshot

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// gauges reports, at each scrape, how many snapshots are not ready, failed, or being deleted,
// counted from the informer cache: no API request per scrape.
type gauges struct {
	c                          *Controller
	notReady, failed, deleting *prometheus.Desc
}

func newGauges(c *Controller) *gauges {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "", name), help, nil, nil)
	}
	return &gauges{
		c:        c,
		notReady: desc(metrics.SnapshotsNotReady, "VolumeSnapshots that are not ready to use yet."),
		failed:   desc(metrics.SnapshotsFailed, "VolumeSnapshots whose status carries an error."),
		deleting: desc(metrics.SnapshotsDeleting, "VolumeSnapshots being deleted."),
	}
}

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.notReady
	ch <- g.failed
	ch <- g.deleting
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	vss, err := g.c.single.snapshots.List(everything)
	if err != nil {
		return
	}
	var notReady, failed, deleting float64
	for _, vs := range vss {
		switch {
		case vs.DeletionTimestamp != nil:
			deleting++
		case vs.Status != nil && vs.Status.Error != nil:
			failed++
		case !protocol.Ready(vs):
			notReady++
		}
	}
	ch <- prometheus.MustNewConstMetric(g.notReady, prometheus.GaugeValue, notReady)
	ch <- prometheus.MustNewConstMetric(g.failed, prometheus.GaugeValue, failed)
	ch <- prometheus.MustNewConstMetric(g.deleting, prometheus.GaugeValue, deleting)
}

// Collectors returns the controller's metrics to register.
func (c *Controller) Collectors() []prometheus.Collector {
	collectors := []prometheus.Collector{newGauges(c), newStateMetrics(c), metrics.Operations, c.writes.count,
		metrics.UpstreamOperations, newInFlight(c)}
	if c.liveness != nil {
		collectors = append(collectors, livenessMetrics{c})
	}
	return collectors
}
