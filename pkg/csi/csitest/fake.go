// Package csitest holds an in-memory csi.Client for tests that honours the same contract as the
// gRPC client: calls the driver's capabilities rule out fail with codes.Unimplemented (final for
// csi.Classify) and never reach the backend.
package csitest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shutter-csi/shutter/pkg/csi"
)

// Fake is an in-memory csi.Client for tests. Snapshots are ready when cut unless NotReady is set;
// Errors make the next calls of a method fail. Calls records every call by method name.
type Fake struct {
	mu sync.Mutex
	// Name and Caps are returned by DriverName and Capabilities. A call Caps rules out is
	// recorded and answered codes.Unimplemented, as the gRPC client refuses it.
	Name string
	Caps csi.Capabilities
	// NotReady makes new snapshots and group snapshots not ready to use until it is cleared.
	NotReady bool
	// Errors holds, per method name ("CreateSnapshot", ...), errors the next calls return in order.
	Errors map[string][]error
	// Calls lists the methods called, in order; Requests the create requests.
	Calls    []string
	Requests []csi.CreateSnapshotRequest
	// Secrets holds the secrets each call was given, by method name, last call wins.
	Secrets map[string]map[string]string

	snapshots map[string]*csi.Snapshot
	groups    map[string]*csi.GroupSnapshot
	now       time.Time
}

var _ csi.Client = (*Fake)(nil)

// NewFake returns a fake driver named name with every capability.
func NewFake(name string) *Fake {
	return &Fake{
		Name:      name,
		Caps:      csi.Capabilities{CreateDeleteSnapshot: true, ListSnapshots: true, GetSnapshot: true, GroupSnapshots: true},
		Errors:    map[string][]error{},
		Secrets:   map[string]map[string]string{},
		snapshots: map[string]*csi.Snapshot{},
		groups:    map[string]*csi.GroupSnapshot{},
		now:       time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

// DriverName implements csi.Client.
func (f *Fake) DriverName() string { return f.Name }

// Capabilities implements csi.Client.
func (f *Fake) Capabilities() csi.Capabilities { return f.Caps }

// call records a call and returns the error queued for it, if any, or codes.Unimplemented when
// the capabilities rule the call out. f.mu is held.
func (f *Fake) call(method string, secrets map[string]string) error {
	f.Calls = append(f.Calls, method)
	if need := f.missing(method); need != "" {
		return status.Errorf(codes.Unimplemented, "%s needs the %s capability", method, need)
	}
	f.Secrets[method] = maps.Clone(secrets)
	if errs := f.Errors[method]; len(errs) > 0 {
		f.Errors[method] = errs[1:]
		return errs[0]
	}
	return nil
}

// missing names the capability that method needs and Caps lacks; "" when it may be called.
func (f *Fake) missing(method string) string {
	switch method {
	case "CreateSnapshot", "DeleteSnapshot":
		if !f.Caps.CreateDeleteSnapshot {
			return "CREATE_DELETE_SNAPSHOT"
		}
	case "GetSnapshot":
		if !f.Caps.GetSnapshot && !f.Caps.ListSnapshots {
			return "LIST_SNAPSHOTS or GET_SNAPSHOT"
		}
	case "CreateGroupSnapshot", "DeleteGroupSnapshot", "GetGroupSnapshot":
		if !f.Caps.GroupSnapshots {
			return "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"
		}
	}
	return ""
}

// CountCalls returns how many times method was called.
func (f *Fake) CountCalls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.Calls {
		if c == method {
			n++
		}
	}
	return n
}

// SetReady makes every snapshot ready to use.
func (f *Fake) SetReady() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.NotReady = false
	for _, s := range f.snapshots {
		s.ReadyToUse = true
	}
	for _, g := range f.groups {
		g.ReadyToUse = true
	}
}

// AddSnapshot makes the backend know a snapshot (a pre-provisioned one).
func (f *Fake) AddSnapshot(s csi.Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapshots[s.ID] = &s
}

// SnapshotIDs lists the ids of the snapshots the backend holds.
func (f *Fake) SnapshotIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.snapshots))
}

// CreateSnapshot implements csi.Client.
func (f *Fake) CreateSnapshot(_ context.Context, req csi.CreateSnapshotRequest) (*csi.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Requests = append(f.Requests, req)
	if err := f.call("CreateSnapshot", req.Secrets); err != nil {
		return nil, err
	}
	id := "snap-" + req.Name
	if s, ok := f.snapshots[id]; ok {
		if s.SourceVolumeID != req.SourceVolumeID {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %s exists for another volume", req.Name)
		}
		return copySnapshot(s), nil
	}
	s := &csi.Snapshot{ID: id, SourceVolumeID: req.SourceVolumeID, CreationTime: f.now, SizeBytes: 1 << 20, ReadyToUse: !f.NotReady}
	f.snapshots[id] = s
	return copySnapshot(s), nil
}

// DeleteSnapshot implements csi.Client.
func (f *Fake) DeleteSnapshot(_ context.Context, id string, secrets map[string]string) error {
	return remove(f, "DeleteSnapshot", secrets, f.snapshots, id)
}

// GetSnapshot implements csi.Client.
func (f *Fake) GetSnapshot(_ context.Context, id string, secrets map[string]string) (*csi.Snapshot, error) {
	return get(f, "GetSnapshot", secrets, f.snapshots, id, copySnapshot)
}

// CreateGroupSnapshot implements csi.Client.
func (f *Fake) CreateGroupSnapshot(_ context.Context, req csi.CreateGroupSnapshotRequest) (*csi.GroupSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("CreateGroupSnapshot", req.Secrets); err != nil {
		return nil, err
	}
	id := "group-" + req.Name
	if g, ok := f.groups[id]; ok {
		return copyGroup(g), nil
	}
	g := &csi.GroupSnapshot{ID: id, CreationTime: f.now, ReadyToUse: !f.NotReady}
	for _, vol := range req.SourceVolumeIDs {
		g.Snapshots = append(g.Snapshots, csi.Snapshot{
			ID: fmt.Sprintf("%s-%s", id, vol), SourceVolumeID: vol, GroupID: id,
			CreationTime: f.now, SizeBytes: 1 << 20, ReadyToUse: !f.NotReady,
		})
	}
	f.groups[id] = g
	return copyGroup(g), nil
}

// DeleteGroupSnapshot implements csi.Client.
func (f *Fake) DeleteGroupSnapshot(_ context.Context, id string, _ []string, secrets map[string]string) error {
	return remove(f, "DeleteGroupSnapshot", secrets, f.groups, id)
}

// GetGroupSnapshot implements csi.Client.
func (f *Fake) GetGroupSnapshot(_ context.Context, id string, _ []string, secrets map[string]string) (*csi.GroupSnapshot, error) {
	return get(f, "GetGroupSnapshot", secrets, f.groups, id, copyGroup)
}

// get answers a Get call of method for id among objs: a copy made by clone,
// or nil when the backend has no such object.
func get[T any](f *Fake, method string, secrets map[string]string, objs map[string]*T, id string, clone func(*T) *T) (*T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(method, secrets); err != nil {
		return nil, err
	}
	obj, ok := objs[id]
	if !ok {
		return nil, nil
	}
	return clone(obj), nil
}

// remove answers a Delete call of method for id among objs; an unknown id
// is success.
func remove[T any](f *Fake, method string, secrets map[string]string, objs map[string]*T, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(method, secrets); err != nil {
		return err
	}
	delete(objs, id)
	return nil
}

// GroupIDs lists the ids of the group snapshots the backend holds.
func (f *Fake) GroupIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.groups))
}

func copySnapshot(s *csi.Snapshot) *csi.Snapshot {
	c := *s
	return &c
}

func copyGroup(g *csi.GroupSnapshot) *csi.GroupSnapshot {
	c := *g
	c.Snapshots = slices.Clone(g.Snapshots)
	for i := range c.Snapshots {
		c.Snapshots[i].ReadyToUse = g.ReadyToUse
	}
	return &c
}
