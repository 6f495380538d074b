//go:build linux

package hostpath

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// nodeServer implements the CSI Node service. Filesystem volumes are bind
// mounted at the target directory; block volumes bind the backing file onto
// a target file. Publications are recorded in the volume's record so that
// single-writer volumes can refuse a second target.
type nodeServer struct {
	csi.UnimplementedNodeServer
	d *Driver
}

// NodeGetCapabilities lists the node RPCs the driver offers.
func (s *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	types := []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH,
	}
	caps := make([]*csi.NodeServiceCapability, 0, len(types))
	for _, t := range types {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t},
		}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// NodeGetInfo reports the node ID, attach limit and topology.
func (s *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	resp := &csi.NodeGetInfoResponse{NodeId: s.d.opts.NodeID, MaxVolumesPerNode: s.d.opts.MaxVolumesPerNode}
	if t := s.d.topology(); t != nil {
		resp.AccessibleTopology = &csi.Topology{Segments: t}
	}
	return resp, nil
}

// NodeStageVolume bind mounts a filesystem volume at the staging path; block
// volumes need no staging. Only the staging path is recorded.
func (s *nodeServer) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetStagingTargetPath()
	v, release, err := s.lockToMount(ctx, id, "staging_target_path", path, req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	defer release()
	if t, err := capabilityAccessType(req.GetVolumeCapability()); err != nil || t != v.AccessType {
		return nil, status.Errorf(codes.InvalidArgument, "volume capability does not fit this %s volume", v.AccessType)
	}
	if v.Staged != "" {
		if v.Staged != path {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is staged at another path", id)
		}
		return &csi.NodeStageVolumeResponse{}, nil
	}
	v.Staged = path
	if err := checkVolumeRecord(v); err != nil {
		return nil, err
	}
	if err := s.d.volumeDataReady(v); err != nil {
		return nil, err
	}
	if v.AccessType == state.AccessMount {
		if err := os.MkdirAll(path, 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "create staging path: %v", err)
		}
		if err := bindMount(s.d.volumePath(id), path, false); err != nil {
			return nil, status.Errorf(codes.Internal, "stage volume: %v", err)
		}
	}
	if err := s.d.volumes.Put(id, v); err != nil {
		_ = unmountAll(path)
		return nil, storeErr("record staging", err)
	}
	klog.FromContext(ctx).V(2).Info("Staged volume", "volumeID", id, "path", path)
	return &csi.NodeStageVolumeResponse{}, nil
}

// lockToMount checks the common part of a NodeStage or NodePublish
// request (the volume ID, the path given as field, a capability), waits
// until the volume's restored data is durable, as it must be before a
// workload may write it (see restore.go), and takes the volume's lock. The
// caller calls release when err is nil.
func (s *nodeServer) lockToMount(ctx context.Context, id, field, path string, c *csi.VolumeCapability) (v state.Volume, release func(), err error) {
	if err := checkID("volume_id", id); err != nil {
		return v, nil, err
	}
	if err := checkTargetPath(field, path, s.d.opts.DataDir); err != nil {
		return v, nil, err
	}
	if c == nil {
		return v, nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if err := s.d.restores.wait(ctx, id); err != nil {
		return v, nil, err
	}
	return s.d.lockVolume(id)
}

// lockTarget checks the volume ID and the path given as field of a
// NodeUnstage or NodeUnpublish request and takes the volume's lock. The
// caller calls release when err is nil.
func (s *nodeServer) lockTarget(id, field, path string) (v state.Volume, release func(), err error) {
	if err := checkID("volume_id", id); err != nil {
		return v, nil, err
	}
	if err := checkTargetPath(field, path, s.d.opts.DataDir); err != nil {
		return v, nil, err
	}
	return s.d.lockVolume(id)
}

// NodeUnstageVolume undoes NodeStageVolume; an unstaged volume is success.
func (s *nodeServer) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetStagingTargetPath()
	v, release, err := s.lockTarget(id, "staging_target_path", path)
	if err != nil {
		return nil, err
	}
	defer release()
	if v.Staged != filepath.Clean(path) && v.Staged != path {
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if err := unmountAll(path); err != nil {
		return nil, status.Errorf(codes.Internal, "unstage volume: %v", err)
	}
	v.Staged = ""
	if err := s.d.volumes.Put(id, v); err != nil {
		return nil, storeErr("record unstaging", err)
	}
	klog.FromContext(ctx).V(2).Info("Unstaged volume", "volumeID", id, "path", path)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume makes a volume available at the target path, read-only
// if asked. Publishing again at the same target with the same mode is
// success; a single-writer volume refuses a second target.
func (s *nodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	v, release, err := s.lockToMount(ctx, id, "target_path", target, req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	defer release()
	readOnly := req.GetReadonly() || isReadOnlyMode(req.GetVolumeCapability())
	if err := checkPublish(v, req.GetVolumeCapability(), target, readOnly); err != nil {
		return nil, err
	}
	if hasKey(v.Published, target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	v.Published = maps.Clone(v.Published)
	if v.Published == nil {
		v.Published = map[string]bool{}
	}
	v.Published[target] = readOnly
	if err := checkVolumeRecord(v); err != nil {
		return nil, err
	}
	if err := s.d.mountTarget(v, target, readOnly); err != nil {
		return nil, err
	}
	if err := s.d.volumes.Put(id, v); err != nil {
		_ = unmountAll(target)
		return nil, storeErr("record publication", err)
	}
	klog.FromContext(ctx).V(2).Info("Published volume", "volumeID", id, "target", target, "readOnly", readOnly)
	return &csi.NodePublishVolumeResponse{}, nil
}

func hasKey(m map[string]bool, k string) bool { _, ok := m[k]; return ok }

func isReadOnlyMode(c *csi.VolumeCapability) bool {
	m := c.GetAccessMode().GetMode()
	return m == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY || m == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// checkPublish validates a publication against the volume's current ones.
func checkPublish(v state.Volume, c *csi.VolumeCapability, target string, readOnly bool) error {
	if t, err := capabilityAccessType(c); err != nil || t != v.AccessType {
		return status.Errorf(codes.InvalidArgument, "volume capability does not fit this %s volume", v.AccessType)
	}
	if ro, ok := v.Published[target]; ok && ro != readOnly {
		return status.Errorf(codes.AlreadyExists, "volume %s is published at %s with readonly=%t", v.ID, target, ro)
	}
	singleWriter := v.SingleWriter || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	if _, ok := v.Published[target]; !ok && singleWriter && len(v.Published) > 0 {
		return status.Errorf(codes.FailedPrecondition, "single-writer volume %s is already published elsewhere", v.ID)
	}
	return nil
}

// mountTarget creates the target (a directory, or a file for block volumes)
// and bind mounts the volume's data onto it.
func (d *Driver) mountTarget(v state.Volume, target string, readOnly bool) error {
	if v.AccessType == state.AccessBlock {
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			return status.Errorf(codes.Internal, "create target parent: %v", err)
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o660)
		if err != nil {
			return status.Errorf(codes.Internal, "create target file: %v", err)
		}
		_ = f.Close()
	} else if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Errorf(codes.Internal, "create target dir: %v", err)
	}
	if err := d.volumeDataReady(v); err != nil {
		return err
	}
	if mounted, err := isMountPoint(target); err != nil || mounted {
		return status.Errorf(codes.FailedPrecondition, "target %s is already a mount point (%v)", target, err)
	}
	if err := bindMount(d.volumePath(v.ID), target, readOnly); err != nil {
		return status.Errorf(codes.Internal, "publish volume: %v", err)
	}
	return nil
}

// NodeUnpublishVolume unmounts and removes the target; a target that is
// already gone is success.
func (s *nodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	v, release, err := s.lockTarget(id, "target_path", target)
	if err != nil {
		return nil, err
	}
	defer release()
	if _, ok := v.Published[target]; ok {
		if err := unmountAll(target); err != nil {
			return nil, status.Errorf(codes.Internal, "unpublish volume: %v", err)
		}
		v.Published = maps.Clone(v.Published)
		delete(v.Published, target)
		if err := s.d.volumes.Put(id, v); err != nil {
			return nil, storeErr("record unpublication", err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove target: %v", err)
	}
	klog.FromContext(ctx).V(2).Info("Unpublished volume", "volumeID", id, "target", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports usage of a volume published or staged at
// volume_path: bytes and inodes for filesystem volumes, size for block.
func (s *nodeServer) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if err := checkID("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	path := req.GetVolumePath()
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	v, err := s.d.lookupVolume("volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if !hasKey(v.Published, path) && v.Staged != path {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s", v.ID, path)
	}
	if v.AccessType == state.AccessBlock {
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Total: v.CapacityBytes, Unit: csi.VolumeUsage_BYTES}}}, nil
	}
	if v.Image {
		return s.d.imageVolumeStats(v)
	}
	used, err := fscopy.DiskUsage(s.d.volumePath(v.ID))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "measure usage: %v", err)
	}
	var fsStat unix.Statfs_t
	if err := unix.Statfs(s.d.volumePath(v.ID), &fsStat); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs: %v", err)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Total: v.CapacityBytes, Used: used, Available: max(v.CapacityBytes-used, 0), Unit: csi.VolumeUsage_BYTES},
		{Total: int64(fsStat.Files), Used: int64(fsStat.Files - fsStat.Ffree), Available: int64(fsStat.Ffree), Unit: csi.VolumeUsage_INODES},
	}}, nil
}

// NodeExpandVolume has nothing to resize on the node: the controller already
// grew the backing file or the image's filesystem (online), and folders
// have no fixed size.
func (s *nodeServer) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if err := checkID("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	v, err := s.d.lookupVolume("volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if req.GetCapacityRange().GetRequiredBytes() > v.CapacityBytes {
		return nil, status.Errorf(codes.OutOfRange, "volume %s has %d bytes; expand it on the controller first", v.ID, v.CapacityBytes)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: v.CapacityBytes}, nil
}

// NodeGetVolumeHealth reports whether the volume's data is present.
func (s *nodeServer) NodeGetVolumeHealth(_ context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	v, err := s.d.lookupVolume("volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: s.d.volumeHealth(v.ID)}, nil
}

// NodeGetStorageHealth reports no problem while the data directory is
// reachable.
func (s *nodeServer) NodeGetStorageHealth(context.Context, *csi.NodeGetStorageHealthRequest) (*csi.NodeGetStorageHealthResponse, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(s.d.opts.DataDir, &st); err != nil {
		return nil, status.Errorf(codes.Unavailable, "data directory unreachable: %v", err)
	}
	return &csi.NodeGetStorageHealthResponse{}, nil
}
