//go:build linux

package hostpath

import (
	"context"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/hostpath/quiesce"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// groupControllerServer implements the CSI GroupController service.
//
// A group snapshot is cut while the driver holds the locks of every member
// volume and, with Options.GroupSnapshotQuiesce, while the pods the members
// are published to are frozen, so that no workload write lands in one
// member's copy and not in another's. All members are copied concurrently
// and share one creation time.
// Its member records are written first and the group record last; Recover
// removes members whose group record is missing, so a crash never leaves a
// half-made group.
type groupControllerServer struct {
	csi.UnimplementedGroupControllerServer
	d *Driver
}

// groupQuiescer freezes the writers of a group snapshot's members while
// they are copied: a *quiesce.Quiescer, which tests may wrap.
type groupQuiescer interface {
	Run(ctx context.Context, key string, uids []string, jobs []func() error) (quiesce.Result, []error, error)
	EndAll()
}

// GroupControllerGetCapabilities reports group snapshot support.
func (s *groupControllerServer) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	return &csi.GroupControllerGetCapabilitiesResponse{Capabilities: []*csi.GroupControllerServiceCapability{{
		Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{
			Type: csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT,
		}},
	}}}, nil
}

// CreateVolumeGroupSnapshot snapshots several volumes at one point in time.
// It is idempotent by name; the same name with other volumes is
// AlreadyExists.
func (s *groupControllerServer) CreateVolumeGroupSnapshot(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	if err := checkName(req.GetName()); err != nil {
		return nil, err
	}
	sources, err := checkGroupSources(req.GetSourceVolumeIds())
	if err != nil {
		return nil, err
	}
	gid := deriveID(groupPrefix, req.GetName())
	keys := []string{groupKey(gid)}
	for _, v := range sources {
		keys = append(keys, volumeKey(v), snapshotKey(memberID(gid, v)))
	}
	release, err := s.d.locks.acquire(keys...)
	if err != nil {
		return nil, err
	}
	defer release()
	if g, ok := s.d.groups.Get(gid); ok {
		if !slices.Equal(g.SourceVolumeIDs, sources) {
			return nil, status.Errorf(codes.AlreadyExists, "group snapshot %q exists for other volumes", req.GetName())
		}
		return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: s.d.csiGroup(g)}, nil
	}
	if err := s.d.groupOnThisNode(sources); err != nil {
		return nil, err
	}
	g, quiesced, err := s.d.cutGroup(ctx, gid, req.GetName(), sources)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Created group snapshot", "groupSnapshotID", gid, "volumes", sources,
		"quiescedPods", quiesced.Pods, "frozenCgroups", quiesced.Targets, "stoppingTook", quiesced.Stopping, "frozenFor", quiesced.Frozen)
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: s.d.csiGroup(g)}, nil
}

// checkGroupSources validates and sorts the source volume IDs.
func checkGroupSources(ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, status.Error(codes.InvalidArgument, "source_volume_ids are required")
	}
	if len(ids) > maxGroupMembers {
		return nil, status.Errorf(codes.InvalidArgument, "source_volume_ids name %d volumes, at most %d are accepted", len(ids), maxGroupMembers)
	}
	for _, id := range ids {
		if err := checkID("source_volume_ids", id); err != nil {
			return nil, err
		}
	}
	sorted := slices.Sorted(slices.Values(ids))
	if len(slices.Compact(slices.Clone(sorted))) != len(sorted) {
		return nil, status.Error(codes.InvalidArgument, "source_volume_ids contain a duplicate")
	}
	return sorted, nil
}

// groupOnThisNode fails with FailedPrecondition when topology is on and some of the sources
// are volumes of this node and others are not: they sit on other nodes, and one node's driver
// cannot cut a group across nodes. (When none is here, cutGroup reports NotFound.)
func (d *Driver) groupOnThisNode(sources []string) error {
	if !d.opts.EnableTopology {
		return nil
	}
	var here, elsewhere []string
	for _, v := range sources {
		if _, ok := d.volumes.Get(v); ok {
			here = append(here, v)
		} else {
			elsewhere = append(elsewhere, v)
		}
	}
	if len(here) == 0 || len(elsewhere) == 0 {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "volumes %v are not on node %s (volumes %v are): a group snapshot is cut by one node's driver, so all its volumes must sit on one node",
		elsewhere, d.opts.NodeID, here)
}

// memberID is the ID of the snapshot of volume vol inside group gid.
func memberID(gid, vol string) string { return deriveID(snapshotPrefix, "group member", gid, vol) }

// cutGroup copies every member volume concurrently, with the processes
// that use them stopped (package quiesce), then writes the member records and
// finally the group record. On failure nothing is left behind.
func (d *Driver) cutGroup(ctx context.Context, gid, name string, sources []string) (state.GroupSnapshot, quiesce.Result, error) {
	created := d.now().UTC()
	members := make([]state.Snapshot, 0, len(sources))
	var pods []string
	for _, v := range sources {
		vol, err := d.lookupVolume("source_volume_ids", v)
		if err != nil {
			return state.GroupSnapshot{}, quiesce.Result{}, err
		}
		members = append(members, state.Snapshot{
			ID: memberID(gid, v), Name: name + "/" + v, SourceVolumeID: v, AccessType: vol.AccessType,
			SizeBytes: vol.CapacityBytes, GroupSnapshotID: gid, Topology: vol.Topology, CreatedAt: created,
		})
		pods = append(pods, writingPods(vol)...)
	}
	jobs := make([]func() error, len(members))
	for i, m := range members {
		jobs[i] = func() error { return d.takeSnapshot(ctx, m) }
	}
	slices.Sort(pods)
	quiesced, errs, err := d.quiesce.Run(ctx, gid, slices.Compact(pods), jobs)
	g := state.GroupSnapshot{ID: gid, Name: name, SourceVolumeIDs: sources, CreatedAt: created}
	for _, m := range members {
		g.SnapshotIDs = append(g.SnapshotIDs, m.ID)
	}
	if err == nil {
		err = firstError(errs)
	}
	if err == nil {
		if perr := d.groups.Put(gid, g); perr != nil {
			err = storeErr("record group snapshot", perr)
		}
	}
	if err != nil {
		for _, m := range members {
			_ = d.deleteSnapshot(m.ID)
		}
		return state.GroupSnapshot{}, quiesced, status.Errorf(status.Code(err), "cut group snapshot: %v", status.Convert(err).Message())
	}
	return g, quiesced, nil
}

// writingPods returns the UIDs of the pods vol is published to read-write,
// from the publish targets the kubelet gave the driver.
func writingPods(vol state.Volume) []string {
	var out []string
	for target, readOnly := range vol.Published {
		if uid, ok := quiesce.PodOfTarget(target); ok && !readOnly {
			out = append(out, uid)
		}
	}
	return out
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// DeleteVolumeGroupSnapshot removes a group snapshot and all its members;
// an unknown ID is success.
func (s *groupControllerServer) DeleteVolumeGroupSnapshot(ctx context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	gid := req.GetGroupSnapshotId()
	g, err := s.d.lookupGroup(gid)
	if status.Code(err) == codes.NotFound {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	// Members are locked too, so that no restore or metadata stream reads
	// a member while it is removed. Membership never changes, so reading
	// the record before locking is safe; it is read again under the lock.
	keys := []string{groupKey(gid)}
	for _, id := range g.SnapshotIDs {
		keys = append(keys, snapshotKey(id))
	}
	release, err := s.d.locks.acquire(keys...)
	if err != nil {
		return nil, err
	}
	defer release()
	g, ok := s.d.groups.Get(gid)
	if !ok {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
	}
	if err := checkMembers(g, req.GetSnapshotIds()); err != nil {
		return nil, err
	}
	if err := s.d.restores.waitSnapshots(ctx, g.SnapshotIDs...); err != nil {
		return nil, err
	}
	// The group record goes first: should the driver die now, Recover
	// removes the members it left.
	if err := s.d.groups.Delete(gid); err != nil {
		return nil, storeErr("delete group record", err)
	}
	for _, id := range g.SnapshotIDs {
		if err := s.d.deleteSnapshot(id); err != nil {
			return nil, err
		}
	}
	klog.FromContext(ctx).V(2).Info("Deleted group snapshot", "groupSnapshotID", gid)
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

// GetVolumeGroupSnapshot returns a group snapshot or NotFound.
func (s *groupControllerServer) GetVolumeGroupSnapshot(_ context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	g, err := s.d.lookupGroup(req.GetGroupSnapshotId())
	if err != nil {
		return nil, err
	}
	if err := checkMembers(g, req.GetSnapshotIds()); err != nil {
		return nil, err
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: s.d.csiGroup(g)}, nil
}

// lookupGroup validates gid and returns its record or NotFound.
func (d *Driver) lookupGroup(gid string) (state.GroupSnapshot, error) {
	return lookup(d.groups, "group snapshot", "group_snapshot_id", gid)
}

// checkMembers reports a mismatch between the group's members and the
// snapshot IDs a request lists, if it lists any.
func checkMembers(g state.GroupSnapshot, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if !slices.Equal(slices.Sorted(slices.Values(ids)), slices.Sorted(slices.Values(g.SnapshotIDs))) {
		return status.Errorf(codes.InvalidArgument, "snapshot_ids do not match the members of group snapshot %s", g.ID)
	}
	return nil
}

// csiGroup converts a group record and its members to CSI form.
func (d *Driver) csiGroup(g state.GroupSnapshot) *csi.VolumeGroupSnapshot {
	out := &csi.VolumeGroupSnapshot{GroupSnapshotId: g.ID, CreationTime: timestamppb.New(g.CreatedAt), ReadyToUse: true}
	for _, id := range g.SnapshotIDs {
		snap, ok := d.snapshots.Get(id)
		if !ok {
			out.ReadyToUse = false
			continue
		}
		out.Snapshots = append(out.Snapshots, d.csiSnapshot(snap))
	}
	return out
}
