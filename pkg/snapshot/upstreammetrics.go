package snapshot

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/metrics"
)

// The upstream snapshot-controller's metrics (metrics.UpstreamOperations and the operations in
// flight), kept beside Shutter's own so that dashboards and alerts written for the upstream image
// keep working. Upstream times each operation from the moment the controller first saw it, kept
// in memory; Shutter times it from the object's creation (deletion, for deletes), which survives
// a restart, and counts the operations in flight from the informer caches at each scrape.

// upstreamOps names one kind's operations in the upstream metrics.
type upstreamOps struct{ create, createAndReady, delete string }

var (
	singleUpstreamOps = upstreamOps{metrics.UpstreamCreate, metrics.UpstreamCreateAndReady, metrics.UpstreamDelete}
	groupUpstreamOps  = upstreamOps{metrics.UpstreamCreateGroup, metrics.UpstreamCreateGroupAndReady, metrics.UpstreamDeleteGroup}
)

// observeStatus records the upstream create operations that a status write from before to after
// finished: created (status.creationTime set) and created and ready.
func (r *reconciler[S, C]) observeStatus(s S, before, after snapshotState, driver string) {
	since := s.GetCreationTimestamp().Time
	if after.created && !before.created {
		r.observeUpstream(r.keys.upstream.create, metrics.UpstreamStatusSuccess, s, driver, since)
	}
	if after.ready && !before.ready {
		r.observeUpstream(r.keys.upstream.createAndReady, metrics.UpstreamStatusSuccess, s, driver, since)
	}
}

// observeDeleted records the upstream delete operation of s, whose finalizers are off, and as
// cancelled the create operations it had not finished.
func (r *reconciler[S, C]) observeDeleted(s S) {
	driver := r.driverOf(s)
	since := s.GetDeletionTimestamp().Time
	r.observeUpstream(r.keys.upstream.delete, metrics.UpstreamStatusSuccess, s, driver, since)
	st := r.kind.state(s)
	if !st.created {
		r.observeUpstream(r.keys.upstream.create, metrics.UpstreamStatusCancel, s, driver, since)
	}
	if !st.ready {
		r.observeUpstream(r.keys.upstream.createAndReady, metrics.UpstreamStatusCancel, s, driver, since)
	}
}

func (r *reconciler[S, C]) observeUpstream(op, status string, s S, driver string, since time.Time) {
	if driver == "" {
		driver = metrics.UpstreamDriverUnknown
	}
	typ := metrics.UpstreamTypeDynamic
	if r.kind.sourceContent(s) != "" {
		typ = metrics.UpstreamTypePreProvisioned
	}
	metrics.UpstreamOperations.WithLabelValues(driver, op, typ, status).Observe(r.clock.Since(since).Seconds())
}

// inFlight reports the upstream snapshot_controller_operations_in_flight at each scrape: the
// create, create-and-ready and delete operations not finished yet, of snapshots and groups.
type inFlight struct {
	c    *Controller
	desc *prometheus.Desc
}

func newInFlight(c *Controller) inFlight {
	return inFlight{c: c, desc: prometheus.NewDesc(metrics.UpstreamOperationsInFlight, "Total number of operations in flight", nil, nil)}
}

func (m inFlight) Describe(ch chan<- *prometheus.Desc) { ch <- m.desc }

func (m inFlight) Collect(ch chan<- prometheus.Metric) {
	n := operationsInFlight(m.c.singles)
	if g := m.c.groups.Load(); g != nil {
		n += operationsInFlight(g.r)
	}
	ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, float64(n))
}

// operationsInFlight counts the unfinished operations of r's snapshots in its informer cache.
func operationsInFlight[S kube.Object[S], C kube.Object[C]](r *reconciler[S, C]) int {
	all, err := r.snapshotLister.List(everything)
	if err != nil {
		return 0
	}
	n := 0
	for _, s := range all {
		st := r.kind.state(s)
		for _, unfinished := range []bool{!st.created, !st.ready, s.GetDeletionTimestamp() != nil} {
			if unfinished {
				n++
			}
		}
	}
	return n
}
