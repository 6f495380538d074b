//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
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
// mounted at the target directory; a block volume's file is attached to a
// loop device, whose node is bound onto the target file (a container
// runtime takes device nodes only). Publications are recorded in the
// volume's record so that single-writer volumes can refuse a second target.
// The kernel work goes through Driver.mounter (mount.go, mounter.Interface).
//
// Invariants:
//   - A recorded publication is only reported as done while its target is
//     mounted: after a node's restart (or a mount lost otherwise) a
//     publish mounts it again.
//   - A mount at a target that no record accounts for was left by a
//     publish cut short (never reported): the next publish or unpublish
//     there removes it. A target recorded for another volume is refused.
//   - A block volume has a read-write loop device while it has a
//     read-write publication, and a read-only one while it has a read-only
//     one; unpublish detaches what is no longer needed, start-up what no
//     record needs (reconcileBlockLoops). A device still open (a
//     container's) goes once it is closed.
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
		if err := s.d.mounter.Bind(s.d.volumePath(id), path, folderBindFlags); err != nil {
			return nil, status.Errorf(codes.Internal, "stage volume: %v", err)
		}
	}
	if err := s.d.volumes.Put(id, v); err != nil {
		_ = s.d.mounter.Unmount(path)
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
	if err := s.d.mounter.Unmount(path); err != nil {
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
// success once the target is mounted; a single-writer volume refuses a
// second target.
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
	recorded := hasKey(v.Published, target)
	if recorded {
		mounted, err := s.d.mounter.IsMountPoint(target)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "check target: %v", err)
		}
		if mounted {
			return &csi.NodePublishVolumeResponse{}, nil
		}
		klog.FromContext(ctx).Info("Publishing again: the target of a recorded publication is not mounted", "volumeID", id, "target", target)
	} else {
		v.Published = maps.Clone(v.Published)
		if v.Published == nil {
			v.Published = map[string]bool{}
		}
		v.Published[target] = readOnly
		if err := checkVolumeRecord(v); err != nil {
			return nil, err
		}
	}
	if err := s.d.mountTarget(ctx, v, target, readOnly); err != nil {
		return nil, err
	}
	if !recorded {
		if err := s.d.volumes.Put(id, v); err != nil {
			_ = s.d.mounter.Unmount(target)
			delete(v.Published, target)
			_ = s.d.releaseLoops(v)
			return nil, storeErr("record publication", err)
		}
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
// and mounts the volume's data there: a bind of its folder, or of the node
// of its loop device.
func (d *Driver) mountTarget(ctx context.Context, v state.Volume, target string, readOnly bool) error {
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
	if err := d.clearStaleTarget(ctx, v.ID, target); err != nil {
		return err
	}
	source, flags := d.volumePath(v.ID), uintptr(folderBindFlags)
	if v.AccessType == state.AccessBlock {
		dev, err := d.mounter.AttachLoop(d.volumePath(v.ID), readOnly)
		if err != nil {
			return status.Errorf(codes.Internal, "attach a loop device: %v", err)
		}
		source, flags = dev, deviceBindFlags
	}
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := d.mounter.Bind(source, target, flags); err != nil {
		if v.AccessType == state.AccessBlock {
			_ = d.releaseLoops(withoutPublication(v, target))
		}
		return status.Errorf(codes.Internal, "publish volume: %v", err)
	}
	return nil
}

// clearStaleTarget unmounts what is mounted at target when no volume's
// record accounts for it: what a publish cut short left, never reported.
// A target recorded for another volume is FailedPrecondition.
func (d *Driver) clearStaleTarget(ctx context.Context, id, target string) error {
	mounted, err := d.mounter.IsMountPoint(target)
	if err != nil {
		return status.Errorf(codes.Internal, "check target: %v", err)
	}
	if !mounted {
		return nil
	}
	for _, o := range d.volumes.List() {
		if o.ID != id && (hasKey(o.Published, target) || o.Staged == target) {
			return status.Errorf(codes.FailedPrecondition, "target %s is where volume %s is published", target, o.ID)
		}
	}
	klog.FromContext(ctx).Info("Unmounting what no record accounts for at a target", "volumeID", id, "target", target)
	if err := d.mounter.Unmount(target); err != nil {
		return status.Errorf(codes.Internal, "unmount what is left at the target: %v", err)
	}
	return nil
}

// withoutPublication returns v without its publication at target.
func withoutPublication(v state.Volume, target string) state.Volume {
	v.Published = maps.Clone(v.Published)
	delete(v.Published, target)
	return v
}

// releaseLoops detaches the loop devices of block volume v that its
// publications no longer need: the read-write one without a read-write
// publication, the read-only one without a read-only one.
func (d *Driver) releaseLoops(v state.Volume) error {
	if v.AccessType != state.AccessBlock {
		return nil
	}
	need := map[bool]bool{}
	for _, ro := range v.Published {
		need[ro] = true
	}
	var errs []error
	for _, ro := range []bool{false, true} {
		if !need[ro] {
			errs = append(errs, d.mounter.DetachLoop(d.volumePath(v.ID), ro))
		}
	}
	return errors.Join(errs...)
}

// syncBlockDevices writes what published block volume v's loop devices
// hold in their caches (a pod's writes not flushed yet) to its file, which
// a snapshot or clone then copies: it has what was written before it.
func (d *Driver) syncBlockDevices(v state.Volume) error {
	if v.AccessType != state.AccessBlock || len(v.Published) == 0 {
		return nil
	}
	if err := d.mounter.SyncLoops(d.volumePath(v.ID)); err != nil {
		return status.Errorf(codes.Internal, "flush the devices of volume %s: %v", v.ID, err)
	}
	return nil
}

// reconcileBlockLoops detaches, at start, the loop devices of block
// volumes' files that no recorded publication needs: what a crash left
// between attaching and recording a publication, or between recording an
// unpublication and detaching. A file without a record (it goes to
// quarantine next) keeps none.
func (d *Driver) reconcileBlockLoops() error {
	entries, err := os.ReadDir(volumesDir(d.opts.DataDir))
	if err != nil {
		return fmt.Errorf("read data dir: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		v, ok := d.volumes.Get(e.Name())
		if !ok {
			v = state.Volume{ID: e.Name(), AccessType: state.AccessBlock}
		}
		if err := d.releaseLoops(v); err != nil {
			return fmt.Errorf("detach the loop devices of %s: %w", e.Name(), err)
		}
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
		if err := s.d.mounter.Unmount(target); err != nil {
			return nil, status.Errorf(codes.Internal, "unpublish volume: %v", err)
		}
		v = withoutPublication(v, target)
		if err := s.d.volumes.Put(id, v); err != nil {
			return nil, storeErr("record unpublication", err)
		}
		// After the record: a crash before this leaves devices that
		// start-up detaches.
		if err := s.d.releaseLoops(v); err != nil {
			return nil, status.Errorf(codes.Internal, "detach loop device: %v", err)
		}
	} else if err := s.d.clearStaleTarget(ctx, id, target); err != nil {
		return nil, err
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
