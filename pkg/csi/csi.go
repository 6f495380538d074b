// Package csi is the sidecar's view of a CSI driver: the few snapshot RPCs it calls, a gRPC
// implementation on csi-lib-utils, and Classify, the one place that decides whether a failed
// call is final or whether the backend may still be working on it. Tests use csitest's fake.
package csi

import (
	"context"
	"time"
)

// Client is what the sidecar needs from a driver. Every call is bounded by the client's timeout.
// Secrets are passed through to the driver and never logged.
type Client interface {
	// DriverName is the name the driver reported in GetPluginInfo.
	DriverName() string
	// Capabilities are what the driver offers.
	Capabilities() Capabilities

	// CreateSnapshot cuts a snapshot of one volume. It is idempotent by req.Name.
	CreateSnapshot(ctx context.Context, req CreateSnapshotRequest) (*Snapshot, error)
	// DeleteSnapshot removes a snapshot; an unknown id is success.
	DeleteSnapshot(ctx context.Context, id string, secrets map[string]string) error
	// GetSnapshot reads a snapshot's state with GetSnapshot or ListSnapshots, whichever the
	// driver offers. It returns a nil snapshot and no error when the driver does not know id.
	GetSnapshot(ctx context.Context, id string, secrets map[string]string) (*Snapshot, error)

	// CreateGroupSnapshot cuts one consistent snapshot of several volumes, idempotent by name.
	CreateGroupSnapshot(ctx context.Context, req CreateGroupSnapshotRequest) (*GroupSnapshot, error)
	// DeleteGroupSnapshot removes a group snapshot and its members; an unknown id is success.
	DeleteGroupSnapshot(ctx context.Context, id string, snapshotIDs []string, secrets map[string]string) error
	// GetGroupSnapshot reads a group snapshot's state. It returns a nil group snapshot and no
	// error when the driver does not know id.
	GetGroupSnapshot(ctx context.Context, id string, snapshotIDs []string, secrets map[string]string) (*GroupSnapshot, error)
}

// Capabilities are the snapshot-related features a driver offers.
type Capabilities struct {
	// CreateDeleteSnapshot is required by the sidecar.
	CreateDeleteSnapshot bool
	// ListSnapshots and GetSnapshot let the sidecar read a snapshot's state by id.
	ListSnapshots, GetSnapshot bool
	// GroupSnapshots: the driver creates, deletes and reads volume group snapshots.
	GroupSnapshots bool
}

// CreateSnapshotRequest is the input of CreateSnapshot.
type CreateSnapshotRequest struct {
	Name           string
	SourceVolumeID string
	Parameters     map[string]string
	Secrets        map[string]string
}

// CreateGroupSnapshotRequest is the input of CreateGroupSnapshot.
type CreateGroupSnapshotRequest struct {
	Name            string
	SourceVolumeIDs []string
	Parameters      map[string]string
	Secrets         map[string]string
}

// Snapshot is a driver's answer about one snapshot.
type Snapshot struct {
	ID             string
	SourceVolumeID string
	GroupID        string
	CreationTime   time.Time
	SizeBytes      int64
	ReadyToUse     bool
}

// GroupSnapshot is a driver's answer about one group snapshot.
type GroupSnapshot struct {
	ID           string
	Snapshots    []Snapshot
	CreationTime time.Time
	ReadyToUse   bool
}
