package snapshot

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/metrics"
)

// stateMetrics reports, at each scrape and from the informer caches only, how many snapshots and
// group snapshots of each driver are pending, ready, failed or being deleted, and how old the
// oldest pending, failed and deleting one is (since creation; since deletion for deleting). The
// labels are the driver and the state, never a name: the series stay few however many objects.
type stateMetrics struct {
	c                          *Controller
	snapshots, snapshotsOldest *prometheus.Desc
	groups, groupsOldest       *prometheus.Desc
}

func newStateMetrics(c *Controller) *stateMetrics {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "", name), help,
			[]string{metrics.LabelDriver, metrics.LabelState}, nil)
	}
	return &stateMetrics{
		c:               c,
		snapshots:       desc(metrics.Snapshots, "VolumeSnapshots by driver and state (pending, ready, failed, deleting)."),
		snapshotsOldest: desc(metrics.SnapshotOldestAgeSeconds, "Age of the oldest pending or failed VolumeSnapshot (since creation) and of the oldest deleting one (since deletion), by driver."),
		groups:          desc(metrics.GroupSnapshots, "VolumeGroupSnapshots by driver and state (pending, ready, failed, deleting)."),
		groupsOldest:    desc(metrics.GroupSnapshotOldestAge, "Age of the oldest pending or failed VolumeGroupSnapshot (since creation) and of the oldest deleting one (since deletion), by driver."),
	}
}

func (m *stateMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.snapshots
	ch <- m.snapshotsOldest
	ch <- m.groups
	ch <- m.groupsOldest
}

func (m *stateMetrics) Collect(ch chan<- prometheus.Metric) {
	now := m.c.clock.Now()
	tallyOf(m.c.singles, now).emit(ch, m.snapshots, m.snapshotsOldest)
	if g := m.c.groups.Load(); g != nil {
		tallyOf(g.r, now).emit(ch, m.groups, m.groupsOldest)
	}
}

// tallyOf counts the snapshots of r's kind by driver (that of the content, or of the class before
// the content exists) and state.
func tallyOf[S kube.Object[S], C kube.Object[C]](r *reconciler[S, C], now time.Time) tally {
	t := tally{}
	all, err := r.snapshotLister.List(everything)
	if err != nil {
		return t
	}
	for _, s := range all {
		driver := r.driverOf(s)
		if driver == "" {
			driver = metrics.DriverUnknown
		}
		st := r.kind.state(s)
		t.add(driver, s, st.ready, st.err != nil, now)
	}
	return t
}

// tally counts objects per driver and state and keeps the oldest age of each.
type tally map[[2]string]*stateCount

type stateCount struct {
	n      float64
	oldest time.Duration
}

var allStates = []string{metrics.StatePending, metrics.StateReady, metrics.StateFailed, metrics.StateDeleting}

func (t tally) add(driver string, obj metav1.Object, ready, failed bool, now time.Time) {
	state, since := metrics.StatePending, obj.GetCreationTimestamp().Time
	switch {
	case obj.GetDeletionTimestamp() != nil:
		state, since = metrics.StateDeleting, obj.GetDeletionTimestamp().Time
	case ready:
		state = metrics.StateReady
	case failed:
		state = metrics.StateFailed
	}
	for _, s := range allStates { // every state of a known driver reports, zeros included
		if t[[2]string{driver, s}] == nil {
			t[[2]string{driver, s}] = &stateCount{oldest: -1}
		}
	}
	sc := t[[2]string{driver, state}]
	sc.n++
	if age := max(now.Sub(since), 0); state != metrics.StateReady && age > sc.oldest {
		sc.oldest = age
	}
}

func (t tally) emit(ch chan<- prometheus.Metric, count, oldest *prometheus.Desc) {
	for key, sc := range t {
		ch <- prometheus.MustNewConstMetric(count, prometheus.GaugeValue, sc.n, key[0], key[1])
		if sc.oldest >= 0 {
			ch <- prometheus.MustNewConstMetric(oldest, prometheus.GaugeValue, sc.oldest.Seconds(), key[0], key[1])
		}
	}
}
