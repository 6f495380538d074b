//go:build linux

package hostpath

import (
	"context"
	"maps"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// ControllerPublishVolume records that a volume is attached to this node,
// within the per-node attach limit. It is offered only with EnableAttach.
func (s *controllerServer) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if err := s.checkAttachRequest(id, node, false); err != nil {
		return nil, err
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	v, release, err := s.d.lockVolume(id)
	if err != nil {
		return nil, err
	}
	defer release()
	if node != s.d.opts.NodeID {
		return nil, status.Errorf(codes.NotFound, "node %s not found", node)
	}
	if t, err := capabilityAccessType(req.GetVolumeCapability()); err != nil || t != v.AccessType {
		return nil, status.Errorf(codes.InvalidArgument, "volume capability does not fit this %s volume", v.AccessType)
	}
	if ro, ok := v.Attachments[node]; ok {
		if ro != req.GetReadonly() {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is attached to %s with readonly=%t", id, node, ro)
		}
		return &csi.ControllerPublishVolumeResponse{}, nil
	}
	if err := s.d.checkAttachLimit(node); err != nil {
		return nil, err
	}
	v.Attachments = maps.Clone(v.Attachments)
	if v.Attachments == nil {
		v.Attachments = map[string]bool{}
	}
	v.Attachments[node] = req.GetReadonly()
	if err := s.d.volumes.Put(id, v); err != nil {
		return nil, storeErr("record attachment", err)
	}
	klog.FromContext(ctx).V(2).Info("Attached volume", "volumeID", id, "node", node)
	return &csi.ControllerPublishVolumeResponse{}, nil
}

// checkAttachRequest refuses an attach or detach request when attach is not
// enabled, then checks its volume ID and its node ID, which only a detach
// may leave out (detach from every node).
func (s *controllerServer) checkAttachRequest(id, node string, detach bool) error {
	if !s.d.opts.EnableAttach {
		return status.Error(codes.Unimplemented, "attach is not enabled")
	}
	if err := checkID("volume_id", id); err != nil {
		return err
	}
	if detach && node == "" {
		return nil
	}
	return checkID("node_id", node)
}

// checkAttachLimit fails with ResourceExhausted when node already has
// MaxVolumesPerNode volumes attached.
func (d *Driver) checkAttachLimit(node string) error {
	if d.opts.MaxVolumesPerNode == 0 {
		return nil
	}
	attached := int64(0)
	for _, v := range d.volumes.List() {
		if _, ok := v.Attachments[node]; ok {
			attached++
		}
	}
	if attached >= d.opts.MaxVolumesPerNode {
		return status.Errorf(codes.ResourceExhausted, "node %s already has %d volumes attached", node, attached)
	}
	return nil
}

// ControllerUnpublishVolume forgets an attachment. An unknown volume or
// node is success: the volume is not attached there.
func (s *controllerServer) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if err := s.checkAttachRequest(id, node, true); err != nil {
		return nil, err
	}
	v, found, release, err := lockIfAny(s.d, s.d.volumes, "volume_id", id, volumeKey(id))
	if err != nil {
		return nil, err
	}
	defer release()
	if !found || len(v.Attachments) == 0 {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	v.Attachments = maps.Clone(v.Attachments)
	if node == "" {
		clear(v.Attachments)
	} else {
		delete(v.Attachments, node)
	}
	if err := s.d.volumes.Put(id, v); err != nil {
		return nil, storeErr("record detachment", err)
	}
	klog.FromContext(ctx).V(2).Info("Detached volume", "volumeID", id, "node", node)
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// ControllerModifyVolume applies mutable parameters (VolumeAttributesClass)
// from the accepted list; others are InvalidArgument. The hostpath driver
// records them; it has no real IOPS or throughput to change.
func (s *controllerServer) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkID("volume_id", id); err != nil {
		return nil, err
	}
	if err := s.d.checkMutableParameters(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	if err := checkParameters("mutable_parameters", req.GetMutableParameters()); err != nil {
		return nil, err
	}
	v, release, err := s.d.lockVolume(id)
	if err != nil {
		return nil, err
	}
	defer release()
	v.MutableParameters = maps.Clone(v.MutableParameters)
	if v.MutableParameters == nil {
		v.MutableParameters = map[string]string{}
	}
	maps.Copy(v.MutableParameters, req.GetMutableParameters())
	if err := checkParameters("mutable_parameters (with those recorded)", v.MutableParameters); err != nil {
		return nil, err
	}
	if err := s.d.volumes.Put(id, v); err != nil {
		return nil, storeErr("record parameters", err)
	}
	klog.FromContext(ctx).V(2).Info("Modified volume", "volumeID", id, "parameters", req.GetMutableParameters())
	return &csi.ControllerModifyVolumeResponse{}, nil
}
