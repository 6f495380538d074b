// Package metrics names every Prometheus metric Shutter exports and provides the workqueue
// metrics of the named queues.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
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
	// Syncs that panicked (controller-runtime's reconcile_panics_total), by queue; each is also
	// counted as an error in reconcile_total.
	ReconcilePanicsTotal = "reconcile_panics_total"
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

// The upstream snapshot-controller's and csi-snapshotter's metric names and labels, served beside
// Shutter's so that dashboards and alerts written for the upstream images keep working.
const (
	UpstreamOperationSeconds   = "snapshot_controller_operation_total_seconds"
	UpstreamOperationsInFlight = "snapshot_controller_operations_in_flight"
	UpstreamLabelDriver        = "driver_name"
	UpstreamLabelOperation     = "operation_name"
	UpstreamLabelStatus        = "operation_status"
	UpstreamLabelType          = "snapshot_type"
	// Operations: created (status.creationTime set), created and ready, deleted (finalizers off).
	UpstreamCreate              = "CreateSnapshot"
	UpstreamCreateAndReady      = "CreateSnapshotAndReady"
	UpstreamDelete              = "DeleteSnapshot"
	UpstreamCreateGroup         = "CreateGroupSnapshot"
	UpstreamCreateGroupAndReady = "CreateGroupSnapshotAndReady"
	UpstreamDeleteGroup         = "DeleteGroupSnapshot"
	UpstreamTypeDynamic         = "dynamic"
	UpstreamTypePreProvisioned  = "pre-provisioned"
	UpstreamStatusSuccess       = "success"
	// UpstreamStatusCancel: the snapshot was deleted before the create finished.
	UpstreamStatusCancel  = "cancel"
	UpstreamDriverUnknown = "unknown"

	// LeaderElectionStatus is client-go's leader election gauge (1 while leading), by Lease name.
	LeaderElectionStatus   = "leader_election_master_status"
	LeaderElectionSlowpath = "leader_election_slowpath_total"
)

// UpstreamOperations is the upstream snapshot-controller's operation latency, with its labels and
// buckets: from the snapshot's creation (or deletion) until the operation's end.
var UpstreamOperations = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    UpstreamOperationSeconds,
	Help:    "Total number of seconds spent by the controller on an operation",
	Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600},
}, []string{UpstreamLabelDriver, UpstreamLabelOperation, UpstreamLabelType, UpstreamLabelStatus})

// The snapshot-metadata sidecar's metrics: upstream's operations histogram (csi-lib-utils', under
// upstream's subsystem and extra labels) and Shutter's own (shutter_snapshot_metadata_*).
const (
	SnapshotMetadataUpstreamSubsystem = "snapshot_metadata_controller"
	LabelTargetSnapshot               = "target_snapshot"
	LabelBaseSnapshot                 = "base_snapshot"

	SnapshotMetadataSubsystem = "snapshot_metadata"
	SnapshotMetadataCalls     = "calls_total"
	SnapshotMetadataActive    = "streams_active"
	SnapshotMetadataRanges    = "ranges_total"
	SnapshotMetadataCovered   = "covered_bytes_total"
	LabelCode                 = "code"
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

// ReconcilePanics counts the syncs of each queue that panicked; pkg/controller's queues recover
// them, log them with their stack and count them here.
var ReconcilePanics = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: Namespace, Name: ReconcilePanicsTotal,
	Help: "Syncs of a queue's keys that panicked (recovered, logged with the stack and retried).",
}, []string{LabelQueue})

var registerOnce sync.Once

// RegisterWorkqueue makes every workqueue created afterwards report depth, adds, latency, work
// duration, unfinished work and retries, labelled with the queue's name, to reg, twice: as
// shutter_workqueue_* and under client-go's plain workqueue_* names (as the upstream images serve
// them); and registers Reconciles and ReconcilePanics with it.
func RegisterWorkqueue(reg prometheus.Registerer) {
	registerOnce.Do(func() {
		p := provider{newQueueVecs(Namespace, prometheus.ExponentialBuckets(0.001, 4, 10)),
			newQueueVecs("", prometheus.ExponentialBuckets(10e-9, 10, 12))}
		for _, v := range p {
			reg.MustRegister(v.depth, v.adds, v.latency, v.work, v.unfinished, v.longest, v.retries)
		}
		reg.MustRegister(Reconciles, ReconcilePanics)
		workqueue.SetProvider(p)
	})
}

var queueLabel = []string{"name"}

// queueVecs are one set of workqueue metrics.
type queueVecs struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

func newQueueVecs(namespace string, buckets []float64) *queueVecs {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, queueLabel)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, queueLabel)
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, queueLabel)
	}
	return &queueVecs{
		depth:      gauge("workqueue_depth", "Current depth of the workqueue."),
		adds:       counter("workqueue_adds_total", "Keys added."),
		latency:    histogram("workqueue_queue_duration_seconds", "Time a key waits before a worker takes it."),
		work:       histogram("workqueue_work_duration_seconds", "Time a worker spends on a key."),
		unfinished: gauge("workqueue_unfinished_work_seconds", "Seconds of work in progress."),
		longest:    gauge("workqueue_longest_running_processor_seconds", "Longest running worker."),
		retries:    counter("workqueue_retries_total", "Keys retried."),
	}
}

// provider hands each queue the metrics of every set.
type provider []*queueVecs

// perSet returns one metric of each set.
func perSet[M any](p provider, metric func(*queueVecs) M) []M {
	out := make([]M, len(p))
	for i, v := range p {
		out[i] = metric(v)
	}
	return out
}

func (p provider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return gauges(perSet(p, func(v *queueVecs) prometheus.Gauge { return v.depth.WithLabelValues(name) }))
}
func (p provider) NewAddsMetric(name string) workqueue.CounterMetric {
	return counters(perSet(p, func(v *queueVecs) prometheus.Counter { return v.adds.WithLabelValues(name) }))
}
func (p provider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return histograms(perSet(p, func(v *queueVecs) prometheus.Observer { return v.latency.WithLabelValues(name) }))
}
func (p provider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return histograms(perSet(p, func(v *queueVecs) prometheus.Observer { return v.work.WithLabelValues(name) }))
}
func (p provider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return gauges(perSet(p, func(v *queueVecs) prometheus.Gauge { return v.unfinished.WithLabelValues(name) }))
}
func (p provider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return gauges(perSet(p, func(v *queueVecs) prometheus.Gauge { return v.longest.WithLabelValues(name) }))
}
func (p provider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return counters(perSet(p, func(v *queueVecs) prometheus.Counter { return v.retries.WithLabelValues(name) }))
}

// gauges, counters and histograms pass each update to every metric of the list.
type (
	gauges     []prometheus.Gauge
	counters   []prometheus.Counter
	histograms []prometheus.Observer
)

func (g gauges) Inc() {
	for _, m := range g {
		m.Inc()
	}
}

func (g gauges) Dec() {
	for _, m := range g {
		m.Dec()
	}
}

func (g gauges) Set(v float64) {
	for _, m := range g {
		m.Set(v)
	}
}

func (c counters) Inc() {
	for _, m := range c {
		m.Inc()
	}
}

func (h histograms) Observe(v float64) {
	for _, m := range h {
		m.Observe(v)
	}
}

var leaderOnce sync.Once

// RegisterLeaderElection makes every leader election created afterwards report client-go's
// leader_election_master_status (1 while leading, 0 otherwise) and leader_election_slowpath_total,
// labelled with the Lease's name, to reg, as the upstream images do.
func RegisterLeaderElection(reg prometheus.Registerer) {
	leaderOnce.Do(func() {
		m := leaderMetrics{
			status: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: LeaderElectionStatus,
				Help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease."}, queueLabel),
			slowpath: prometheus.NewCounterVec(prometheus.CounterOpts{Name: LeaderElectionSlowpath,
				Help: "Total number of slow path exercised in renewing leader leases. 'name' is the string used to identify the lease."}, queueLabel),
		}
		reg.MustRegister(m.status, m.slowpath)
		leaderelection.SetProvider(m)
	})
}

// leaderMetrics is client-go's leader election metrics provider and metric.
type leaderMetrics struct {
	status   *prometheus.GaugeVec
	slowpath *prometheus.CounterVec
}

func (m leaderMetrics) NewLeaderMetric() leaderelection.LeaderMetric { return m }
func (m leaderMetrics) On(name string)                               { m.status.WithLabelValues(name).Set(1) }
func (m leaderMetrics) Off(name string)                              { m.status.WithLabelValues(name).Set(0) }
func (m leaderMetrics) SlowpathExercised(name string)                { m.slowpath.WithLabelValues(name).Inc() }
