// Package snapshotmetadata is the snapshot-metadata sidecar of KEP-3314: it serves the Kubernetes
// SnapshotMetadata gRPC API (the upstream external-snapshot-metadata stubs, so that any client
// of that API works) over TLS next to a CSI driver, and turns each call into the driver's CSI
// SnapshotMetadata call.
//
// For every call, in this order:
//   - the request's own fields are checked (InvalidArgument, OutOfRange);
//   - the caller's token is reviewed for the service's audience (Unauthenticated) and the caller
//     must be allowed to get VolumeSnapshots in the request's namespace (PermissionDenied);
//   - the namespace and snapshot name become the bound content's snapshot handle: an unknown
//     snapshot is NotFound, one not ready yet Unavailable, another driver's InvalidArgument; a
//     delta's base handle, when a content of this cluster records it, must be of the same driver
//     and volume as the target (InvalidArgument);
//   - the driver's stream is relayed one message at a time: nothing is buffered, so a client
//     that reads slowly slows the driver down (gRPC flow control), and the driver's stream ends
//     with the call: when the client cancels, and at the latest after the maximum stream
//     duration, even if the client stopped reading.
package snapshotmetadata

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	api "github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
)

// Operation names, as upstream's metrics name them.
const (
	OpAllocated = "MetadataAllocated"
	OpDelta     = "MetadataDelta"
)

// Config is what a Server needs.
type Config struct {
	// Driver is the CSI driver's name; CSI its SnapshotMetadata service.
	Driver string
	CSI    csi.SnapshotMetadataClient
	// Kube reviews tokens and access and reads secrets; Snapshots reads the snapshot kinds and
	// the SnapshotMetadataService.
	Kube      kubernetes.Interface
	Snapshots clientset.Interface
	// ContentsByHandle returns the VolumeSnapshotContents whose status records a snapshot handle
	// (an informer index); nil checks no delta base.
	ContentsByHandle func(handle string) []*snapshotv1.VolumeSnapshotContent
	// Audience, when set, replaces the SnapshotMetadataService's.
	Audience string
	// MaxStreamDuration bounds every call; 0 means ten minutes.
	MaxStreamDuration time.Duration
	// Metrics records every call; nil records nothing.
	Metrics *Metrics
}

// Server implements the Kubernetes SnapshotMetadata service.
type Server struct {
	api.UnimplementedSnapshotMetadataServer
	cfg Config
	ops atomic.Int64
}

// NewServer returns the service for cfg.
func NewServer(cfg Config) *Server {
	if cfg.MaxStreamDuration <= 0 {
		cfg.MaxStreamDuration = 10 * time.Minute
	}
	return &Server{cfg: cfg}
}

// GetMetadataAllocated streams the allocated ranges of a snapshot.
func (s *Server) GetMetadataAllocated(req *api.GetMetadataAllocatedRequest, stream api.SnapshotMetadata_GetMetadataAllocatedServer) (err error) {
	ctx, end := s.begin(stream.Context(), OpAllocated, req.GetNamespace()+"/"+req.GetSnapshotName(), "",
		"namespace", req.GetNamespace(), "snapshot", req.GetSnapshotName(),
		"startingOffset", req.GetStartingOffset(), "maxResults", req.GetMaxResults())
	sent := &relayed{}
	defer func() { end(sent, err) }()
	if err := checkRequest(req.GetSecurityToken(), req.GetNamespace(), map[string]string{"snapshot_name": req.GetSnapshotName()},
		req.GetStartingOffset(), req.GetMaxResults()); err != nil {
		return err
	}
	if err := s.authorize(ctx, req.GetSecurityToken(), req.GetNamespace()); err != nil {
		return err
	}
	target, err := s.resolve(ctx, req.GetNamespace(), req.GetSnapshotName())
	if err != nil {
		return err
	}
	secrets, err := s.secrets(ctx, target)
	if err != nil {
		return err
	}
	from, err := s.cfg.CSI.GetMetadataAllocated(ctx, &csi.GetMetadataAllocatedRequest{
		SnapshotId: target.handle, StartingOffset: req.GetStartingOffset(), MaxResults: req.GetMaxResults(), Secrets: secrets,
	})
	if err != nil {
		return driverError(err)
	}
	return relay(ctx, sent, from.Recv, func(r *csi.GetMetadataAllocatedResponse) error {
		return stream.Send(&api.GetMetadataAllocatedResponse{
			BlockMetadataType: api.BlockMetadataType(r.GetBlockMetadataType()), VolumeCapacityBytes: r.GetVolumeCapacityBytes(),
			BlockMetadata: blocks(r.GetBlockMetadata()),
		})
	})
}

// GetMetadataDelta streams the ranges that changed between a base snapshot, given by its CSI
// handle, and a target snapshot, given by its name.
func (s *Server) GetMetadataDelta(req *api.GetMetadataDeltaRequest, stream api.SnapshotMetadata_GetMetadataDeltaServer) (err error) {
	ctx, end := s.begin(stream.Context(), OpDelta, req.GetNamespace()+"/"+req.GetTargetSnapshotName(), req.GetBaseSnapshotId(),
		"namespace", req.GetNamespace(), "baseSnapshotId", req.GetBaseSnapshotId(), "targetSnapshot", req.GetTargetSnapshotName(),
		"startingOffset", req.GetStartingOffset(), "maxResults", req.GetMaxResults())
	sent := &relayed{}
	defer func() { end(sent, err) }()
	if err := checkRequest(req.GetSecurityToken(), req.GetNamespace(),
		map[string]string{"base_snapshot_id": req.GetBaseSnapshotId(), "target_snapshot_name": req.GetTargetSnapshotName()},
		req.GetStartingOffset(), req.GetMaxResults()); err != nil {
		return err
	}
	if err := s.authorize(ctx, req.GetSecurityToken(), req.GetNamespace()); err != nil {
		return err
	}
	target, err := s.resolve(ctx, req.GetNamespace(), req.GetTargetSnapshotName())
	if err != nil {
		return err
	}
	if err := s.checkBase(target, req.GetBaseSnapshotId()); err != nil {
		return err
	}
	secrets, err := s.secrets(ctx, target)
	if err != nil {
		return err
	}
	from, err := s.cfg.CSI.GetMetadataDelta(ctx, &csi.GetMetadataDeltaRequest{
		BaseSnapshotId: req.GetBaseSnapshotId(), TargetSnapshotId: target.handle,
		StartingOffset: req.GetStartingOffset(), MaxResults: req.GetMaxResults(), Secrets: secrets,
	})
	if err != nil {
		return driverError(err)
	}
	return relay(ctx, sent, from.Recv, func(r *csi.GetMetadataDeltaResponse) error {
		return stream.Send(&api.GetMetadataDeltaResponse{
			BlockMetadataType: api.BlockMetadataType(r.GetBlockMetadataType()), VolumeCapacityBytes: r.GetVolumeCapacityBytes(),
			BlockMetadata: blocks(r.GetBlockMetadata()),
		})
	})
}

// begin starts a call: its context ends after the maximum stream duration (and with the
// client's), carries a logger with the call's values, and end records the outcome.
func (s *Server) begin(parent context.Context, op, target, base string, kv ...any) (context.Context, func(*relayed, error)) {
	logger := klog.FromContext(parent).WithValues(append([]any{"op", fmt.Sprintf("%s-%d", op, s.ops.Add(1))}, kv...)...)
	ctx, cancel := context.WithTimeoutCause(klog.NewContext(parent, logger), s.cfg.MaxStreamDuration, errMaxDuration)
	start := time.Now()
	s.cfg.Metrics.started(op)
	logger.V(4).Info("Call started")
	return ctx, func(sent *relayed, err error) {
		cancel()
		d := time.Since(start)
		s.cfg.Metrics.done(op, target, base, sent, d, err)
		if err != nil {
			logger.V(2).Info("Call failed", "code", status.Code(err).String(), "err", err.Error(), "messages", sent.messages.Load(), "duration", d)
			return
		}
		logger.V(4).Info("Call done", "messages", sent.messages.Load(), "ranges", sent.ranges.Load(), "duration", d)
	}
}

// checkRequest checks what a request must carry before anything is looked up: the token, the
// namespace, the named fields, a starting offset that is not negative and max_results that is
// not negative (0 lets the driver choose).
func checkRequest(token, namespace string, required map[string]string, offset int64, maxResults int32) error {
	if token == "" {
		return status.Error(codes.InvalidArgument, "security_token is missing")
	}
	if namespace == "" {
		return status.Error(codes.InvalidArgument, "namespace is missing")
	}
	for _, field := range []string{"snapshot_name", "base_snapshot_id", "target_snapshot_name"} {
		if v, ok := required[field]; ok && v == "" {
			return status.Errorf(codes.InvalidArgument, "%s is missing", field)
		}
	}
	if offset < 0 {
		return status.Errorf(codes.OutOfRange, "starting_offset %d is negative", offset)
	}
	if maxResults < 0 {
		return status.Errorf(codes.InvalidArgument, "max_results %d is negative (0 lets the driver choose)", maxResults)
	}
	return nil
}

// driverError passes a driver's gRPC status on and turns anything else into Internal.
func driverError(err error) error {
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	return status.Errorf(codes.Internal, "CSI driver: %v", err)
}

func blocks(in []*csi.BlockMetadata) []*api.BlockMetadata {
	out := make([]*api.BlockMetadata, len(in))
	for i, b := range in {
		out[i] = &api.BlockMetadata{ByteOffset: b.GetByteOffset(), SizeBytes: b.GetSizeBytes()}
	}
	return out
}
