package schedule

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shutter-csi/shutter/pkg/metrics"
)

// The schedule reconciler's metrics; names and labels are in pkg/metrics.
var (
	scheduleRuns = metrics.NewCounterVec(metrics.ScheduleRuns,
		"SnapshotSchedule runs, by result: taken (snapshots created) or failed (none created).", metrics.LabelResult)
	scheduleMissedRuns = metrics.NewCounter(metrics.ScheduleMissedRuns,
		"SnapshotSchedule runs skipped: missed while the controller was down or later than startingDeadlineSeconds.")
	scheduleFailures = metrics.NewCounterVec(metrics.ScheduleFailures,
		"SnapshotSchedule failures reported in a Warning event, by reason.", metrics.LabelReason)
	schedulePruned = metrics.NewCounter(metrics.SchedulePruned, "Scheduled snapshots deleted by retention policies.")
	scheduleRunLag = metrics.NewHistogram(metrics.ScheduleRunLag, "How long after its scheduled time a run took its snapshots.",
		[]float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 3600})
	scheduleNextRun = metrics.NewHistogram(metrics.ScheduleNextRunWait, "Time from a schedule's sync to its next run (the timer it sets).",
		prometheus.ExponentialBuckets(1, 4, 10))
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
