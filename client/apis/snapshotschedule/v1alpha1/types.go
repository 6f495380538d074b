package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels and annotations the schedule controller reads and writes on the snapshots it takes.
const (
	// LabelSchedule names the SnapshotSchedule that took a snapshot, for users and for the
	// controller to look at the schedule when the snapshot changes. It proves nothing: anyone who
	// may create a snapshot may set it. What a schedule may prune is in its status.snapshots.
	LabelSchedule = "snapshot.shutter.dev/schedule"
	// LabelKeep set to "true" by a user on a scheduled snapshot keeps it from ever being pruned.
	LabelKeep = "snapshot.shutter.dev/keep"
	// AnnotationScheduledTime is the run a snapshot was taken for (RFC 3339, UTC), for users.
	// Retention orders snapshots by the run time recorded in the schedule's status.snapshots.
	AnnotationScheduledTime = "snapshot.shutter.dev/scheduled-time"
)

// Condition types of a SnapshotSchedule.
const (
	// ConditionReady is True while the schedule is valid and taking snapshots on time.
	ConditionReady = "Ready"
	// ConditionSuspended is True while spec.suspend is true.
	ConditionSuspended = "Suspended"
	// ConditionFailing is True while the latest run could not take its snapshots or one of
	// them failed.
	ConditionFailing = "Failing"
)

// ConcurrencyPolicy says whether a run may start while the previous run's snapshots are not
// ready yet.
// +kubebuilder:validation:Enum=Allow;Forbid
type ConcurrencyPolicy string

const (
	// ConcurrencyAllow starts every run on time.
	ConcurrencyAllow ConcurrencyPolicy = "Allow"
	// ConcurrencyForbid starts no run while a snapshot of the previous run is neither ready nor
	// failed; the run starts once they are, if its starting deadline has not passed.
	ConcurrencyForbid ConcurrencyPolicy = "Forbid"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SnapshotSchedule takes VolumeSnapshots of the claims it selects (or one VolumeGroupSnapshot of
// all of them) on a cron schedule, and prunes the snapshots it took by a retention policy.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=snapsched,categories=shutter
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="TimeZone",type=string,JSONPath=`.spec.timeZone`
// +kubebuilder:printcolumn:name="Group",type=boolean,JSONPath=`.spec.group`,priority=1
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Failing",type=string,JSONPath=`.status.conditions[?(@.type=="Failing")].reason`,priority=1
// +kubebuilder:printcolumn:name="Kept",type=integer,JSONPath=`.status.keptSnapshots`,description="Snapshots the schedule holds now."
// +kubebuilder:printcolumn:name="LastSchedule",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="NextSchedule",type=string,JSONPath=`.status.nextScheduleTime`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="the name of a SnapshotSchedule must be at most 63 characters: it is the value of the snapshot.shutter.dev/schedule label on its snapshots"
type SnapshotSchedule struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says when to take snapshots of what, and how long to keep them.
	Spec SnapshotScheduleSpec `json:"spec"`

	// status is what the schedule controller observed.
	// +optional
	Status *SnapshotScheduleStatus `json:"status,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SnapshotScheduleList is a list of SnapshotSchedules.
// +kubebuilder:object:root=true
type SnapshotScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the SnapshotSchedules.
	Items []SnapshotSchedule `json:"items"`
}

// SnapshotScheduleSpec is the desired state of a SnapshotSchedule.
// +kubebuilder:validation:XValidation:rule="!has(self.snapshotTemplate) || !has(self.snapshotTemplate.volumeGroupSnapshotClassName) || self.group",message="snapshotTemplate.volumeGroupSnapshotClassName needs group: true"
// +kubebuilder:validation:XValidation:rule="!has(self.snapshotTemplate) || !has(self.snapshotTemplate.volumeSnapshotClassName) || !self.group",message="snapshotTemplate.volumeSnapshotClassName is for group: false; with group: true set volumeGroupSnapshotClassName"
type SnapshotScheduleSpec struct {
	// schedule is when to take snapshots: five cron fields (minute hour day-of-month month
	// day-of-week, e.g. "0 * * * *" for every hour) or one of @yearly, @annually, @monthly,
	// @weekly, @daily, @midnight, @hourly. Times are in timeZone.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="!self.contains('TZ=')",message="schedule must not carry a time zone (TZ= or CRON_TZ=); set spec.timeZone"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('@every')",message="@every is not supported: it has no fixed times; use cron fields such as \"*/15 * * * *\""
	// +kubebuilder:validation:XValidation:rule="self.contains('TZ=') || self.startsWith('@every') || self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$') || self.matches('^[0-9A-Za-z*/,?-]+( +[0-9A-Za-z*/,?-]+){4}$')",message="schedule must be five cron fields (minute hour day-of-month month day-of-week, e.g. \"0 * * * *\") made of digits, names, and * / , - ?, or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
	Schedule string `json:"schedule"`

	// timeZone is the IANA name of the time zone schedule and the retention tiers are read in,
	// such as "Europe/Berlin"; UTC when left out. The controller reports an unknown name in the
	// Ready condition.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$')",message="timeZone must be an IANA time zone name such as Europe/Berlin or UTC"
	// +kubebuilder:validation:XValidation:rule="self != 'Local'",message="timeZone must name a zone; Local would be the controller's own"
	TimeZone *string `json:"timeZone,omitempty"`

	// claimSelector selects, by label, the PersistentVolumeClaims in the schedule's namespace to
	// snapshot. An empty selector selects every claim of the namespace.
	ClaimSelector metav1.LabelSelector `json:"claimSelector"`

	// group takes one VolumeGroupSnapshot of all selected claims per run (one instant across the
	// volumes) instead of one VolumeSnapshot per claim. It cannot change: the snapshots of the
	// other mode would no longer be pruned.
	// +optional
	// +kubebuilder:default=false
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="group is immutable; create another schedule for the other mode"
	Group bool `json:"group"`

	// snapshotTemplate is copied into every snapshot the schedule takes.
	// +optional
	SnapshotTemplate *SnapshotTemplate `json:"snapshotTemplate,omitempty"`

	// retention says which of the schedule's snapshots to keep; without it every snapshot is
	// kept.
	// +optional
	Retention *Retention `json:"retention,omitempty"`

	// deleteSnapshotsWithSchedule gives the snapshots the schedule holds an owner reference to
	// it, so that deleting the schedule (kubectl delete, helm uninstall, a GitOps prune) deletes
	// them too, and with a Delete policy their backend data. Off by default: a schedule's
	// backups outlive it. The controller keeps the owner references of the snapshots in
	// status.snapshots as this field says, adding or removing them when it changes.
	// +optional
	// +kubebuilder:default=false
	DeleteSnapshotsWithSchedule bool `json:"deleteSnapshotsWithSchedule"`

	// suspend stops taking and pruning snapshots while true.
	// +optional
	// +kubebuilder:default=false
	Suspend bool `json:"suspend"`

	// startingDeadlineSeconds is how late a run may still start. A run missed by more (the
	// controller was down, or concurrencyPolicy Forbid held it back) is skipped and counted in
	// status.missedRuns. Whatever the deadline, at most the latest missed run is taken: a
	// controller that comes back never takes a burst of catch-up snapshots.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self > 0",message="startingDeadlineSeconds must be at least 1; leave it out for no deadline"
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// concurrencyPolicy is Allow (every run starts on time) or Forbid (no run starts while a
	// snapshot of the previous run is neither ready nor failed).
	// +optional
	// +kubebuilder:default=Allow
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`
}

// SnapshotTemplate is what every snapshot of a schedule is created with.
// +kubebuilder:validation:XValidation:rule="!has(self.labels) || !('snapshot.shutter.dev/schedule' in self.labels)",message="snapshotTemplate.labels must not set snapshot.shutter.dev/schedule: the controller sets it"
// +kubebuilder:validation:XValidation:rule="!has(self.labels) || !('snapshot.shutter.dev/keep' in self.labels)",message="snapshotTemplate.labels must not set snapshot.shutter.dev/keep: every snapshot would be kept forever"
type SnapshotTemplate struct {
	// labels are added to every snapshot.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations are added to every snapshot.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// volumeSnapshotClassName is the class of the VolumeSnapshots; the default class of each
	// claim's driver when left out.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="volumeSnapshotClassName must not be the empty string when set"
	VolumeSnapshotClassName *string `json:"volumeSnapshotClassName,omitempty"`

	// volumeGroupSnapshotClassName is the class of the VolumeGroupSnapshots (group: true); the
	// driver's default group class when left out.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="volumeGroupSnapshotClassName must not be the empty string when set"
	VolumeGroupSnapshotClassName *string `json:"volumeGroupSnapshotClassName,omitempty"`
}

// Retention says which snapshots of a schedule are kept: a snapshot is kept when any rule keeps
// it, and pruned otherwise. Rules apply to each claim's snapshots separately (to the group
// snapshots as one series with group: true) and count only ready snapshots, by the time of the
// run that took them. A failed snapshot is pruned once a later snapshot of the same series is
// ready; a snapshot still being taken, or labelled snapshot.shutter.dev/keep=true, never is.
// +kubebuilder:validation:XValidation:rule="has(self.maxCount) || has(self.maxAge) || has(self.hourly) || has(self.daily) || has(self.weekly) || has(self.monthly)",message="retention needs at least one of maxCount, maxAge, hourly, daily, weekly, monthly; leave retention out to keep every snapshot"
type Retention struct {
	// maxCount keeps the newest maxCount snapshots.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self > 0",message="maxCount must be at least 1"
	MaxCount *int32 `json:"maxCount,omitempty"`

	// maxAge keeps every snapshot younger than this Go duration, such as "168h" for a week.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(h|m|s))+$')",message="maxAge must be a duration in hours, minutes and seconds such as 168h or 90m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(h|m|s))+$') || duration(self) > duration('0s')",message="maxAge must be longer than zero"
	MaxAge *string `json:"maxAge,omitempty"`

	// hourly keeps the first snapshot of each of the latest hourly hours that have one.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self > 0",message="hourly must be at least 1"
	Hourly *int32 `json:"hourly,omitempty"`

	// daily keeps the first snapshot of each of the latest daily days that have one.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self > 0",message="daily must be at least 1"
	Daily *int32 `json:"daily,omitempty"`

	// weekly keeps the first snapshot of each of the latest weekly weeks (Monday to Sunday)
	// that have one.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self > 0",message="weekly must be at least 1"
	Weekly *int32 `json:"weekly,omitempty"`

	// monthly keeps the first snapshot of each of the latest monthly calendar months that have
	// one.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self > 0",message="monthly must be at least 1"
	Monthly *int32 `json:"monthly,omitempty"`
}

// SnapshotScheduleStatus is the observed state of a SnapshotSchedule.
type SnapshotScheduleStatus struct {
	// observedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// lastScheduleTime is the scheduled time of the latest run that took snapshots.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// lastSuccessfulTime is the scheduled time of the latest run whose snapshots all became
	// ready.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`

	// nextScheduleTime is when the next run is due; absent while suspended or invalid.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// lastMissedTime is the scheduled time of the latest run that was skipped.
	// +optional
	LastMissedTime *metav1.Time `json:"lastMissedTime,omitempty"`

	// missedRuns counts the runs skipped since the schedule was created: missed while the
	// controller was down, or started too late for startingDeadlineSeconds.
	// +optional
	MissedRuns int64 `json:"missedRuns,omitempty"`

	// keptSnapshots is how many of the schedule's snapshots exist after the latest pruning.
	// +optional
	KeptSnapshots int32 `json:"keptSnapshots,omitempty"`

	// prunedSnapshots counts the snapshots the retention policy deleted.
	// +optional
	PrunedSnapshots int64 `json:"prunedSnapshots,omitempty"`

	// snapshots are the snapshots the controller took for this schedule and still holds: the only
	// ones retention counts and prunes, in the order they were taken. The controller records
	// each one's uid as it creates it, so that a snapshot it did not create, whatever its name,
	// labels, annotations or owner references, is never taken for one of the schedule's. Only
	// the controller writes status; grant no one else snapshotschedules/status. Beyond
	// MaxScheduledSnapshots the oldest are let go: kept, no longer counted or pruned.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2000
	Snapshots []ScheduledSnapshot `json:"snapshots,omitempty"`

	// conditions are Ready, Suspended and Failing.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MaxScheduledSnapshots is how many snapshots status.snapshots holds at most.
const MaxScheduledSnapshots = 2000

// ScheduledSnapshot is a snapshot a schedule took: a VolumeSnapshot, or a VolumeGroupSnapshot
// with group: true, in the schedule's namespace.
type ScheduledSnapshot struct {
	// name is the snapshot's name.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid is the snapshot's uid: an object that has the name but another uid is not this
	// snapshot.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	UID types.UID `json:"uid"`

	// runTime is the scheduled time of the run that took the snapshot; retention orders by it.
	RunTime metav1.Time `json:"runTime"`
}
