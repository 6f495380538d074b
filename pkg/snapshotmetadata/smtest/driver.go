package smtest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Snapshot is what the fake driver knows of one snapshot.
type Snapshot struct {
	Volume   string
	Capacity int64
	// Allocated are its allocated ranges, sorted, as {offset, size}.
	Allocated [][2]int64
}

// Driver is a fake CSI driver with the Identity and SnapshotMetadata services. Snapshots are
// known by id; a delta is the ranges listed in Deltas under "base/target". Endless makes every
// stream send batches until its context ends.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedSnapshotMetadataServer
	Name      string
	Type      csi.BlockMetadataType
	Snapshots map[string]Snapshot
	Deltas    map[string][][2]int64
	Endless   bool
	// Generated, when positive, replaces every snapshot's ranges by that many ranges of
	// Stride/2 bytes, one every Stride bytes, made as they are sent (a huge sparse volume).
	Generated, Stride int64

	// Open counts streams being served; Ended receives once per stream that ended.
	Open  atomic.Int64
	Ended chan struct{}
	mu    sync.Mutex
	// Secrets are the secrets of the last call.
	Secrets map[string]string

	// Socket is where the driver listens.
	Socket string
}

// StartDriver serves d on a Unix socket in a temporary folder until the test ends.
func StartDriver(t testing.TB, d *Driver) *Driver {
	t.Helper()
	if d.Type == csi.BlockMetadataType_UNKNOWN {
		d.Type = csi.BlockMetadataType_VARIABLE_LENGTH
	}
	d.Ended = make(chan struct{}, 1024)
	d.Socket = filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterSnapshotMetadataServer(srv, d)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return d
}

// GetPluginInfo implements csi.IdentityServer.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.Name, VendorVersion: "test"}, nil
}

// GetPluginCapabilities implements csi.IdentityServer.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE}},
	}}}, nil
}

// Probe implements csi.IdentityServer.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// GetMetadataAllocated implements csi.SnapshotMetadataServer.
func (d *Driver) GetMetadataAllocated(req *csi.GetMetadataAllocatedRequest, stream csi.SnapshotMetadata_GetMetadataAllocatedServer) error {
	defer d.track()()
	d.remember(req.GetSecrets())
	snap, ok := d.Snapshots[req.GetSnapshotId()]
	if !ok {
		return status.Errorf(codes.NotFound, "snapshot %s not found", req.GetSnapshotId())
	}
	return d.serve(stream.Context(), snap.Capacity, snap.Allocated, req.GetStartingOffset(), req.GetMaxResults(), func(b []*csi.BlockMetadata) error {
		return stream.Send(&csi.GetMetadataAllocatedResponse{BlockMetadataType: d.Type, VolumeCapacityBytes: snap.Capacity, BlockMetadata: b})
	})
}

// GetMetadataDelta implements csi.SnapshotMetadataServer.
func (d *Driver) GetMetadataDelta(req *csi.GetMetadataDeltaRequest, stream csi.SnapshotMetadata_GetMetadataDeltaServer) error {
	defer d.track()()
	d.remember(req.GetSecrets())
	base, ok := d.Snapshots[req.GetBaseSnapshotId()]
	target, ok2 := d.Snapshots[req.GetTargetSnapshotId()]
	if !ok || !ok2 {
		return status.Errorf(codes.NotFound, "snapshot %s or %s not found", req.GetBaseSnapshotId(), req.GetTargetSnapshotId())
	}
	if base.Volume != target.Volume {
		return status.Error(codes.InvalidArgument, "snapshots of different volumes")
	}
	ranges := d.Deltas[req.GetBaseSnapshotId()+"/"+req.GetTargetSnapshotId()]
	return d.serve(stream.Context(), target.Capacity, ranges, req.GetStartingOffset(), req.GetMaxResults(), func(b []*csi.BlockMetadata) error {
		return stream.Send(&csi.GetMetadataDeltaResponse{BlockMetadataType: d.Type, VolumeCapacityBytes: target.Capacity, BlockMetadata: b})
	})
}

func (d *Driver) track() func() {
	d.Open.Add(1)
	return func() { d.Open.Add(-1); d.Ended <- struct{}{} }
}

func (d *Driver) remember(secrets map[string]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.Secrets = secrets
}

// LastSecrets returns the secrets of the last call.
func (d *Driver) LastSecrets() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Secrets
}

// serve sends the ranges from offset on in batches of at most maxResults (default 2), or
// endless batches when Endless is set.
func (d *Driver) serve(ctx context.Context, capacity int64, ranges [][2]int64, offset int64, maxResults int32, send func([]*csi.BlockMetadata) error) error {
	if offset < 0 || offset > capacity {
		return status.Errorf(codes.OutOfRange, "starting_offset %d outside the volume's %d bytes", offset, capacity)
	}
	n := int(maxResults)
	if n <= 0 {
		n = 2
	}
	if d.Generated > 0 {
		return d.generate(offset, max(n, 256), send)
	}
	if d.Endless {
		for i := int64(0); ctx.Err() == nil; i++ {
			if err := send([]*csi.BlockMetadata{{ByteOffset: i << 20, SizeBytes: 1 << 20}}); err != nil {
				return err
			}
		}
		return ctx.Err()
	}
	var batch []*csi.BlockMetadata
	for _, r := range ranges {
		if r[0]+r[1] <= offset {
			continue
		}
		batch = append(batch, &csi.BlockMetadata{ByteOffset: r[0], SizeBytes: r[1]})
		if len(batch) == n {
			if err := send(batch); err != nil {
				return err
			}
			batch = nil
		}
	}
	if len(batch) > 0 {
		return send(batch)
	}
	return nil
}

func (d *Driver) generate(offset int64, n int, send func([]*csi.BlockMetadata) error) error {
	batch := make([]*csi.BlockMetadata, 0, n)
	for i := offset / d.Stride; i < d.Generated; i++ {
		batch = append(batch, &csi.BlockMetadata{ByteOffset: i * d.Stride, SizeBytes: d.Stride / 2})
		if len(batch) == n {
			if err := send(batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		return send(batch)
	}
	return nil
}

// String names the driver for test logs.
func (d *Driver) String() string { return fmt.Sprintf("fake driver %s at %s", d.Name, d.Socket) }
