package schedule

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shutter-csi/shutter/pkg/metrics"
)

// The schedule reconciler's metrics; names and labels are in pkg/metrics.
var (
	scheduleRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: metrics.ScheduleRuns,
		Help: "SnapshotSchedule runs, by result: taken (snapshots created) or failed (none created).",
	}, []string{metrics.LabelResult})
	scheduleMissedRuns = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: metrics.ScheduleMissedRuns,
		Help: "SnapshotSchedule runs skipped: missed while the controller was down or later than startingDeadlineSeconds.",
	})
	scheduleFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: metrics.ScheduleFailures,
		Help: "SnapshotSchedule failures reported in a Warning event, by reason.",
	}, []string{metrics.LabelReason})
	schedulePruned = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: metrics.SchedulePruned,
		Help: "Scheduled snapshots deleted by retention policies.",
	})
	scheduleRunLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Name: metrics.ScheduleRunLag,
		Help:    "How long after its scheduled time a run took its snapshots.",
		Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 3600},
	})
	scheduleNextRun = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Name: metrics.ScheduleNextRunWait,
		Help:    "Time from a schedule's sync to its next run (the timer it sets).",
		Buckets: prometheus.ExponentialBuckets(1, 4, 10),
	})
)

// Collectors returns the schedule metrics to register.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{scheduleRuns, scheduleMissedRuns, scheduleFailures, schedulePruned, scheduleRunLag, scheduleNextRun}
}

var registered sync.Once

// registerOnce registers the schedule metrics with reg the first time it is called (a
// controller that loses and regains leadership starts the reconciler again).
func registerOnce(reg prometheus.Registerer) (err error) {
	registered.Do(func() { err = register(reg) })
	return err
}

func register(reg prometheus.Registerer) error {
	for _, c := range Collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
