// Package metrics names every Prometheus metric Shutter exports and provides the workqueue
// metrics of the named queues.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Metric names and labels.
const (
	Namespace = "shutter"

	OperationDuration = "operation_duration_seconds"
	SnapshotsNotReady = "snapshots_not_ready"
	SnapshotsFailed   = "snapshots_failed"
	SnapshotsDeleting = "snapshots_being_deleted"

	// The hostpath driver's: data it moved to quarantine, by kind (volume,
	// snapshot, record-log), the disk its quarantine folder takes, and
	// whether its last start left the data folders alone.
	HostpathQuarantined     = "hostpath_quarantined_total"
	HostpathQuarantineBytes = "hostpath_quarantine_bytes"
	HostpathCleanupHalted   = "hostpath_cleanup_halted"

	// Gauges by driver and state, and the age of the oldest object per driver and state,
	// computed from the informer caches at each scrape.
	Snapshots                = "snapshots"
	GroupSnapshots           = "group_snapshots"
	SnapshotOldestAgeSeconds = "snapshot_oldest_age_seconds"
	GroupSnapshotOldestAge   = "group_snapshot_oldest_age_seconds"
	ContentsWithoutSidecar   = "snapshot_contents_without_sidecar"
	StatePending             = "pending"
	StateReady               = "ready"
	StateFailed              = "failed"
	StateDeleting            = "deleting"
	LabelDriver              = "driver"
	LabelState               = "state"
	DriverUnknown            = "unknown"

	LabelOperation = "operation"
	LabelStatus    = "status"
	LabelKind      = "kind"

	// SnapshotSchedule runs: taken or failed (by result), missed, failures by reason, pruned
	// snapshots, how late runs start and how far ahead the next run is.
	ScheduleRuns        = "schedule_runs_total"
	ScheduleMissedRuns  = "schedule_missed_runs_total"
	ScheduleFailures    = "schedule_failures_total"
	SchedulePruned      = "schedule_snapshots_pruned_total"
	ScheduleRunLag      = "schedule_run_lag_seconds"
	ScheduleNextRunWait = "schedule_next_run_seconds"

	LabelResult = "result"
	LabelReason = "reason"

	RunTaken  = "taken"
	RunFailed = "failed"

	OperationCreate      = "CreateSnapshot"
	OperationDelete      = "DeleteSnapshot"
	OperationCreateGroup = "CreateGroupSnapshot"
	OperationDeleteGroup = "DeleteGroupSnapshot"
	StatusSuccess        = "success"
	StatusFailure        = "failure"

	// Syncs of every queue's keys by outcome, as the queue routed them (controller-runtime's
	// reconcile_total), labelled with the queue's name as the workqueue metrics are.
	ReconcileTotal        = "reconcile_total"
	LabelQueue            = "name"
	ReconcileSuccess      = "success"
	ReconcileRequeue      = "requeue"       // a conflict: retried with backoff, quietly
	ReconcileRequeueAfter = "requeue_after" // waiting for something else, not a failure
	ReconcileError        = "error"
	ReconcileFinal        = "final" // reported to the user; not retried until the object changes
)

// Writes to the API server, counted by kind, what was written (create, metadata, status,
// delete) and result; and the csi-snapshotter sidecar's own metrics (shutter_snapshotter_*).
const (
	ControllerAPIWrites = "controller_api_writes_total"

	SidecarSubsystem        = "snapshotter"
	SidecarOperations       = "operations_total"
	SidecarOperationSeconds = "operation_duration_seconds"
	SidecarAPIWrites        = "api_writes_total"
	// CSIMetricPrefix starts the names of the CSI call metrics that csi-lib-utils records.
	CSIMetricPrefix = "csi_"

	LabelOutcome = "outcome"
	LabelWrite   = "write"

	ResultOK    = "ok"
	ResultError = "error"
)

// Operations is the latency of whole snapshot operations, from request to outcome.
var Operations = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Namespace: Namespace, Name: OperationDuration,
	Help:    "Time from a snapshot operation's request until its outcome.",
	Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600},
}, []string{LabelOperation, LabelStatus})

// Reconciles counts the syncs of each queue by outcome; pkg/controller's queues count into it.
var Reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: Namespace, Name: ReconcileTotal,
	Help: "Syncs of a queue's keys by outcome: success, requeue (conflict), requeue_after, error, final.",
}, []string{LabelQueue, LabelResult})

var registerOnce sync.Once

// RegisterWorkqueue makes every workqueue created afterwards report depth, adds, latency, work
// duration, unfinished work and retries, labelled with the queue's name, to reg, and registers
// Reconciles with it.
func RegisterWorkqueue(reg prometheus.Registerer) {
	registerOnce.Do(func() {
		p := &provider{
			depth:      prometheus.NewGaugeVec(opts("workqueue_depth", "Current depth of the workqueue."), queueLabel),
			adds:       prometheus.NewCounterVec(prometheus.CounterOpts(opts("workqueue_adds_total", "Keys added.")), queueLabel),
			latency:    histogram("workqueue_queue_duration_seconds", "Time a key waits before a worker takes it."),
			work:       histogram("workqueue_work_duration_seconds", "Time a worker spends on a key."),
			unfinished: prometheus.NewGaugeVec(opts("workqueue_unfinished_work_seconds", "Seconds of work in progress."), queueLabel),
			longest:    prometheus.NewGaugeVec(opts("workqueue_longest_running_processor_seconds", "Longest running worker."), queueLabel),
			retries:    prometheus.NewCounterVec(prometheus.CounterOpts(opts("workqueue_retries_total", "Keys retried.")), queueLabel),
		}
		reg.MustRegister(p.depth, p.adds, p.latency, p.work, p.unfinished, p.longest, p.retries, Reconciles)
		workqueue.SetProvider(p)
	})
}

var queueLabel = []string{"name"}

func opts(name, help string) prometheus.GaugeOpts {
	return prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}
}

func histogram(name, help string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, queueLabel)
}

type provider struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

func (p *provider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}
func (p *provider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}
func (p *provider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}
func (p *provider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.work.WithLabelValues(name)
}
func (p *provider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name)
}
func (p *provider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longest.WithLabelValues(name)
}
func (p *provider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}
