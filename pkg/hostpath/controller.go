//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// defaultVolumeSize is provisioned when a request names no capacity.
const defaultVolumeSize = 1 << 30

// controllerServer implements the CSI Controller service. Volume RPCs are in
// this file; snapshots are in snapshots.go and attach/modify in attach.go.
type controllerServer struct {
	csi.UnimplementedControllerServer
	d *Driver
}

// ControllerGetCapabilities lists the controller RPCs the driver offers.
func (s *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_VOLUME,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
	}
	if s.d.opts.EnableAttach {
		types = append(types,
			csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
			csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
			csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES)
	}
	caps := make([]*csi.ControllerServiceCapability, 0, len(types))
	for _, t := range types {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t},
		}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// volumeSpec is a validated CreateVolume request.
type volumeSpec struct {
	id, name     string
	size, limit  int64
	accessType   state.AccessType
	singleWriter bool
	sourceSnap   string
	sourceVol    string
	// placed: topology is on and the request names where the volume may go, so a source that
	// is not on this node is another node's (ResourceExhausted, which lets the provisioner ask
	// the scheduler for another node) rather than missing.
	placed bool
}

// CreateVolume provisions a volume, empty or from a snapshot or volume. It
// is idempotent by name: the ID is derived from the name.
func (s *controllerServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	spec, err := s.parseCreateVolume(req)
	if err != nil {
		return nil, err
	}
	keys := []string{volumeKey(spec.id)}
	if spec.sourceSnap != "" {
		keys = append(keys, snapshotKey(spec.sourceSnap))
	}
	if spec.sourceVol != "" {
		keys = append(keys, volumeKey(spec.sourceVol))
	}
	release, err := s.d.locks.acquire(keys...)
	if err != nil {
		return nil, err
	}
	defer release()
	if v, ok := s.d.volumes.Get(spec.id); ok {
		if err := compatibleVolume(v, spec); err != nil {
			return nil, err
		}
		return &csi.CreateVolumeResponse{Volume: s.d.csiVolume(v)}, nil
	}
	source, err := s.d.volumeSource(spec)
	if err != nil {
		return nil, err
	}
	v := state.Volume{
		ID: spec.id, Name: spec.name, CapacityBytes: spec.size, AccessType: spec.accessType,
		Topology: s.d.topology(), SourceSnapshotID: spec.sourceSnap, SourceVolumeID: spec.sourceVol,
		Parameters: req.GetParameters(), MutableParameters: req.GetMutableParameters(),
		SingleWriter: spec.singleWriter, CreatedAt: s.d.now().UTC(), Image: s.d.imageBacked(spec.accessType),
	}
	unreserve, err := s.d.reserve(volumeKey(spec.id), storedBytes(v), "")
	if err != nil {
		return nil, err
	}
	defer unreserve()
	// An empty snapshot has no data to copy, so a volume restored from it
	// is flushed at once, like a new one, and needs no pending marker. An
	// image is filled and flushed before it is mounted in place.
	if source.path != "" && spec.sourceSnap != "" && s.d.opts.Sync && s.d.opts.BackgroundRestoreSync && !v.Image {
		err = s.d.restoreInBackground(v, source)
	} else {
		err = s.d.createVolumeData(v, source)
	}
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Created volume", "volumeID", v.ID, "bytes", v.CapacityBytes, "accessType", v.AccessType)
	return &csi.CreateVolumeResponse{Volume: s.d.csiVolume(v)}, nil
}

// createVolumeData builds volume v's data, empty or copied from source, and
// then records the volume.
func (d *Driver) createVolumeData(v state.Volume, source volumeData) error {
	c := d.copier
	if v.SourceSnapshotID != "" {
		c = fscopy.Copier{Sync: d.opts.Sync, HolesKnown: true, Direct: true}
	}
	build := func() error { return d.buildVolume(c, v.ID, v.AccessType, v.CapacityBytes, source) }
	if v.Image {
		build = func() error { return d.buildImageVolume(c, v, source) }
	}
	if err := build(); err != nil {
		return err
	}
	if err := d.volumes.Put(v.ID, v); err != nil {
		if v.Image {
			_ = d.unmountImage(v.ID)
		}
		_ = d.removeVolumeData(v)
		return storeErr("record volume", err)
	}
	return nil
}

// parseCreateVolume validates a CreateVolume request without touching disk.
func (s *controllerServer) parseCreateVolume(req *csi.CreateVolumeRequest) (volumeSpec, error) {
	if err := checkName(req.GetName()); err != nil {
		return volumeSpec{}, err
	}
	accessType, singleWriter, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return volumeSpec{}, err
	}
	if err := s.d.checkMutableParameters(req.GetMutableParameters()); err != nil {
		return volumeSpec{}, err
	}
	if err := checkParameters("parameters", req.GetParameters()); err != nil {
		return volumeSpec{}, err
	}
	if err := checkParameters("mutable_parameters", req.GetMutableParameters()); err != nil {
		return volumeSpec{}, err
	}
	if err := s.d.checkAccessibility(req.GetAccessibilityRequirements()); err != nil {
		return volumeSpec{}, err
	}
	spec := volumeSpec{
		id: deriveID(volumePrefix, req.GetName()), name: req.GetName(),
		accessType: accessType, singleWriter: singleWriter,
		sourceSnap: req.GetVolumeContentSource().GetSnapshot().GetSnapshotId(),
		sourceVol:  req.GetVolumeContentSource().GetVolume().GetVolumeId(),
		placed:     s.d.opts.EnableTopology && req.GetAccessibilityRequirements() != nil,
	}
	if src := req.GetVolumeContentSource(); src != nil {
		if err := checkContentSource(src); err != nil {
			return volumeSpec{}, err
		}
	}
	spec.size, spec.limit, err = s.d.volumeSize(req.GetCapacityRange())
	return spec, err
}

// checkContentSource validates the ID in a volume content source.
func checkContentSource(src *csi.VolumeContentSource) error {
	switch {
	case src.GetSnapshot() != nil:
		return checkID("volume_content_source.snapshot.snapshot_id", src.GetSnapshot().GetSnapshotId())
	case src.GetVolume() != nil:
		return checkID("volume_content_source.volume.volume_id", src.GetVolume().GetVolumeId())
	default:
		return status.Error(codes.InvalidArgument, "volume_content_source has no snapshot or volume")
	}
}

// volumeSize turns a capacity range into the size to provision and the limit.
func (d *Driver) volumeSize(r *csi.CapacityRange) (size, limit int64, err error) {
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if required < 0 || limit < 0 {
		return 0, 0, status.Error(codes.InvalidArgument, "capacity_range must not be negative")
	}
	if limit > 0 && required > limit {
		return 0, 0, status.Errorf(codes.InvalidArgument, "required_bytes %d exceeds limit_bytes %d", required, limit)
	}
	size = required
	if size == 0 {
		size = defaultVolumeSize
		if limit > 0 {
			size = min(size, limit)
		}
	}
	if size > d.opts.MaxVolumeSize {
		return 0, 0, status.Errorf(codes.OutOfRange, "%d bytes requested, the largest volume is %d bytes", size, d.opts.MaxVolumeSize)
	}
	return size, limit, nil
}

// checkCapabilities validates volume capabilities: at least one, each with
// an access type and a single-node access mode, all of the same access type.
func checkCapabilities(caps []*csi.VolumeCapability) (state.AccessType, bool, error) {
	if len(caps) == 0 {
		return "", false, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	var accessType state.AccessType
	singleWriter := false
	for _, c := range caps {
		t, err := capabilityAccessType(c)
		if err != nil {
			return "", false, err
		}
		if accessType != "" && t != accessType {
			return "", false, status.Error(codes.InvalidArgument, "volume_capabilities mix block and mount access")
		}
		accessType = t
		if c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
			singleWriter = true
		}
	}
	return accessType, singleWriter, nil
}

// capabilityAccessType checks one capability and returns its access type.
func capabilityAccessType(c *csi.VolumeCapability) (state.AccessType, error) {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
	case csi.VolumeCapability_AccessMode_UNKNOWN:
		return "", status.Error(codes.InvalidArgument, "volume capability has no access mode")
	default:
		return "", status.Errorf(codes.InvalidArgument, "access mode %s is not supported: volumes live on one node", c.GetAccessMode().GetMode())
	}
	switch {
	case c.GetBlock() != nil:
		return state.AccessBlock, nil
	case c.GetMount() != nil:
		return state.AccessMount, nil
	default:
		return "", status.Error(codes.InvalidArgument, "volume capability has no access type")
	}
}

// checkMutableParameters rejects keys not in Options.MutableParameters.
func (d *Driver) checkMutableParameters(params map[string]string) error {
	for k := range params {
		if !slices.Contains(d.opts.MutableParameters, k) {
			return status.Errorf(codes.InvalidArgument, "mutable parameter %q is not supported (accepted: %v)", k, d.opts.MutableParameters)
		}
	}
	return nil
}

// checkAccessibility fails with ResourceExhausted when the requisite
// topologies exclude this node.
func (d *Driver) checkAccessibility(req *csi.TopologyRequirement) error {
	if !d.opts.EnableTopology || len(req.GetRequisite()) == 0 {
		return nil
	}
	for _, t := range req.GetRequisite() {
		if maps.Equal(t.GetSegments(), d.topology()) {
			return nil
		}
	}
	return status.Error(codes.ResourceExhausted, "no requisite topology includes this node")
}

// compatibleVolume decides whether an existing volume satisfies a repeated
// CreateVolume with the same name.
func compatibleVolume(v state.Volume, spec volumeSpec) error {
	sizeOK := v.CapacityBytes >= spec.size && (spec.limit == 0 || v.CapacityBytes <= spec.limit)
	if !sizeOK || v.AccessType != spec.accessType || v.SourceSnapshotID != spec.sourceSnap || v.SourceVolumeID != spec.sourceVol {
		return status.Errorf(codes.AlreadyExists, "volume %q exists with different size, access type or source", spec.name)
	}
	return nil
}

// DeleteVolume removes a volume; an unknown ID is success. A volume still
// attached or published is refused with FailedPrecondition.
func (s *controllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	v, found, release, err := lockIfAny(s.d, s.d.volumes, "volume_id", id, volumeKey(id))
	if err != nil {
		return nil, err
	}
	defer release()
	if !found {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if len(v.Attachments) > 0 || len(v.Published) > 0 || v.Staged != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still attached, staged or published", id)
	}
	if v.Image {
		// Before the record goes: a start-up after a crash here mounts
		// the volume again.
		if err := s.d.unmountImage(id); err != nil {
			return nil, err
		}
	}
	if err := s.d.volumes.Delete(id); err != nil {
		return nil, storeErr("delete volume record", err)
	}
	if err := s.d.restores.forget(id); err != nil {
		return nil, storeErr("delete restore marker", err)
	}
	if err := s.d.removeVolumeData(v); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Deleted volume", "volumeID", id)
	return &csi.DeleteVolumeResponse{}, nil
}

// lockVolume takes a volume's lock (Aborted when an operation on it is in flight) and reads its
// record. The caller calls release when err is nil.
func (d *Driver) lockVolume(id string) (v state.Volume, release func(), err error) {
	if release, err = d.locks.acquire(volumeKey(id)); err != nil {
		return v, nil, err
	}
	if v, err = d.lookupVolume("volume_id", id); err != nil {
		release()
		return v, nil, err
	}
	return v, release, nil
}

// lockIfAny validates id (named field in errors), takes the lock key
// (Aborted when an operation on it is in flight) and reads id's record from
// table; found is false when there is none. The caller calls release when
// err is nil.
func lockIfAny[T any](d *Driver, table *state.Table[T], field, id, key string) (rec T, found bool, release func(), err error) {
	if err = checkID(field, id); err != nil {
		return rec, false, nil, err
	}
	if release, err = d.locks.acquire(key); err != nil {
		return rec, false, nil, err
	}
	rec, found = table.Get(id)
	return rec, found, release, nil
}

// lookup validates id (named field in errors) and returns its record in
// table, or NotFound naming the kind of record.
func lookup[T any](table *state.Table[T], kind, field, id string) (rec T, err error) {
	if err := checkID(field, id); err != nil {
		return rec, err
	}
	rec, ok := table.Get(id)
	if !ok {
		return rec, status.Errorf(codes.NotFound, "%s %s not found", kind, id)
	}
	return rec, nil
}

// lookupVolume validates id and returns its record or NotFound.
func (d *Driver) lookupVolume(field, id string) (state.Volume, error) {
	return lookup(d.volumes, "volume", field, id)
}

// ValidateVolumeCapabilities confirms capabilities that match the volume's
// access type and are single-node.
func (s *controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if err := checkID("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	v, err := s.d.lookupVolume("volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	for _, c := range req.GetVolumeCapabilities() {
		t, err := capabilityAccessType(c)
		if err != nil || t != v.AccessType {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("capability %v is not supported by this %s volume", c, v.AccessType)}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
		MutableParameters:  req.GetMutableParameters(),
	}}, nil
}

// ListVolumes pages through volumes in ID order; see page for the token.
func (s *controllerServer) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	vols, next, err := page(s.d.volumes.List(), func(v state.Volume) string { return v.ID }, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csi.ListVolumesResponse{NextToken: next}
	for _, v := range vols {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: s.d.csiVolume(v),
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: slices.Sorted(maps.Keys(v.Attachments))},
		})
	}
	return resp, nil
}

// tokenPrefix starts every paging token; the rest is the ID of the first
// entry of the next page. Entries deleted between pages do not invalidate a
// token: the listing resumes at the next ID in order.
const tokenPrefix = "next:"

// page returns the entries at or after token, at most max of them (0 = all),
// and the token of the next page. A token not made by page is Aborted.
func page[T any](all []T, id func(T) string, token string, maxEntries int32) ([]T, string, error) {
	if maxEntries < 0 {
		return nil, "", status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	start := 0
	if token != "" {
		var ok bool
		token, ok = strings.CutPrefix(token, tokenPrefix)
		if !ok || checkID("starting_token", token) != nil {
			return nil, "", status.Errorf(codes.Aborted, "starting_token %q is not valid", token)
		}
		start, _ = slices.BinarySearchFunc(all, token, func(e T, t string) int {
			switch {
			case id(e) < t:
				return -1
			case id(e) > t:
				return 1
			}
			return 0
		})
	}
	rest := all[start:]
	if maxEntries == 0 || int(maxEntries) >= len(rest) {
		return rest, "", nil
	}
	return rest[:maxEntries], tokenPrefix + id(rest[maxEntries]), nil
}

// GetCapacity reports unprovisioned bytes, or 0 for another node's topology.
func (s *controllerServer) GetCapacity(_ context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if t := req.GetAccessibleTopology(); s.d.opts.EnableTopology && t != nil && !maps.Equal(t.GetSegments(), s.d.topology()) {
		return &csi.GetCapacityResponse{}, nil
	}
	free := s.d.freeCapacity()
	return &csi.GetCapacityResponse{
		AvailableCapacity: free,
		MaximumVolumeSize: wrapperspb.Int64(min(free, s.d.opts.MaxVolumeSize)),
	}, nil
}

// ControllerExpandVolume grows a volume: block volumes get a larger file,
// image volumes a larger image and filesystem (growImageVolume; where that
// cannot be done, FailedPrecondition before anything changes).
func (s *controllerServer) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkID("volume_id", id); err != nil {
		return nil, err
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity_range is required")
	}
	size, _, err := s.d.volumeSize(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	v, release, err := s.d.lockVolume(id)
	if err != nil {
		return nil, err
	}
	defer release()
	if size <= v.CapacityBytes {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.CapacityBytes}, nil
	}
	if v.Image {
		if err := s.d.canGrowImage(v, size); err != nil {
			return nil, err
		}
	}
	grown := v
	grown.CapacityBytes = size
	unreserve, err := s.d.reserve(volumeKey(id), storedBytes(grown), id)
	if err != nil {
		return nil, err
	}
	defer unreserve()
	if err := s.d.growVolume(v, size); err != nil {
		return nil, err
	}
	v.CapacityBytes = size
	if err := s.d.volumes.Put(id, v); err != nil {
		return nil, storeErr("record volume", err)
	}
	klog.FromContext(ctx).V(2).Info("Expanded volume", "volumeID", id, "bytes", size)
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size}, nil
}

// growVolume grows a block volume's file or an image volume's image and
// filesystem to size bytes; a folder volume has no size to change.
func (d *Driver) growVolume(v state.Volume, size int64) error {
	var err error
	switch {
	case v.AccessType == state.AccessBlock:
		err = resizeFile(d.volumePath(v.ID), size, d.opts.Sync)
		if err == nil && len(v.Published) > 0 {
			// Its loop devices show the file's new size only when told.
			err = d.mounter.ResizeLoops(d.volumePath(v.ID))
		}
	case v.Image:
		err = d.growImageVolume(v, size)
	}
	if status.Code(err) != codes.Unknown {
		return err
	}
	if err != nil {
		return status.Errorf(codes.Internal, "grow volume: %v", err)
	}
	return nil
}

// ControllerGetVolume returns a volume and the nodes it is attached to.
func (s *controllerServer) ControllerGetVolume(_ context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	v, err := s.d.lookupVolume("volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeResponse{
		Volume: s.d.csiVolume(v),
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: slices.Sorted(maps.Keys(v.Attachments))},
	}, nil
}

// ControllerGetVolumeHealth reports a volume whose data is missing as
// inaccessible and any other volume as healthy.
func (s *controllerServer) ControllerGetVolumeHealth(_ context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	v, err := s.d.lookupVolume("volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeHealthResponse{VolumeHealth: s.d.volumeHealth(v.ID)}, nil
}

// ControllerListVolumeHealth lists volumes with a known health problem.
func (s *controllerServer) ControllerListVolumeHealth(_ context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	var sick []string
	for _, id := range s.d.volumes.IDs() {
		if len(s.d.volumeHealth(id).GetHealthStatuses()) > 0 {
			sick = append(sick, id)
		}
	}
	ids, next, err := page(sick, func(id string) string { return id }, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csi.ControllerListVolumeHealthResponse{NextToken: next}
	for _, id := range ids {
		resp.Entries = append(resp.Entries, s.d.volumeHealth(id))
	}
	return resp, nil
}

// volumeHealth checks that a volume's data is still there.
func (d *Driver) volumeHealth(id string) *csi.VolumeHealth {
	h := &csi.VolumeHealth{VolumeId: id}
	if _, err := os.Lstat(d.volumePath(id)); errors.Is(err, fs.ErrNotExist) {
		h.HealthStatuses = []*csi.VolumeHealth_VolumeHealthEntry{{
			Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: "DataMissing",
			Message: "the volume's data is missing from the data directory",
		}}
	} else if v, ok := d.volumes.Get(id); ok && d.volumeDataReady(v) != nil {
		h.HealthStatuses = []*csi.VolumeHealth_VolumeHealthEntry{{
			Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: "NotMounted",
			Message: "the volume's filesystem image could not be mounted (see the driver's log)",
		}}
	}
	return h
}

// csiVolume converts a record to its CSI form.
func (d *Driver) csiVolume(v state.Volume) *csi.Volume {
	out := &csi.Volume{VolumeId: v.ID, CapacityBytes: v.CapacityBytes}
	if v.Topology != nil {
		out.AccessibleTopology = []*csi.Topology{{Segments: v.Topology}}
	}
	switch {
	case v.SourceSnapshotID != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: v.SourceSnapshotID},
		}}
	case v.SourceVolumeID != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.SourceVolumeID},
		}}
	}
	return out
}
