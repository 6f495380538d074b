package stack

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// CSI is a client of the hostpath driver's socket that stands in for the external-provisioner:
// it creates volumes (empty or from a snapshot) and reads the backend's snapshots.
type CSI struct {
	conn       *grpc.ClientConn
	identity   csi.IdentityClient
	controller csi.ControllerClient
	dataDir    string
}

// DialCSI connects to the driver's socket; dataDir is the driver's --datadir.
func DialCSI(socket, dataDir string) (*CSI, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &CSI{conn: conn, identity: csi.NewIdentityClient(conn), controller: csi.NewControllerClient(conn), dataDir: dataDir}, nil
}

// Close closes the connection.
func (c *CSI) Close() { _ = c.conn.Close() }

// Probe asks the driver whether it is ready.
func (c *CSI) Probe(ctx context.Context) error {
	_, err := c.identity.Probe(ctx, &csi.ProbeRequest{})
	return err
}

// CreateVolume creates a filesystem volume named name (idempotent by name) of size bytes, restored
// from the backend snapshot fromSnapshot when that is not empty, and returns its volume ID.
func (c *CSI) CreateVolume(ctx context.Context, name string, size int64, fromSnapshot string) (string, error) {
	req := &csi.CreateVolumeRequest{
		Name:          name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	}
	if fromSnapshot != "" {
		req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: fromSnapshot},
		}}
	}
	resp, err := c.controller.CreateVolume(ctx, req)
	if err != nil {
		return "", fmt.Errorf("CreateVolume %s: %w", name, err)
	}
	return resp.GetVolume().GetVolumeId(), nil
}

// DeleteVolume deletes a volume; deleting one that is gone succeeds.
func (c *CSI) DeleteVolume(ctx context.Context, id string) error {
	if _, err := c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		return fmt.Errorf("DeleteVolume %s: %w", id, err)
	}
	return nil
}

// ListSnapshots returns every snapshot the backend holds.
func (c *CSI) ListSnapshots(ctx context.Context) ([]*csi.Snapshot, error) {
	var out []*csi.Snapshot
	token := ""
	for {
		resp, err := c.controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: token})
		if err != nil {
			return nil, fmt.Errorf("ListSnapshots: %w", err)
		}
		for _, e := range resp.GetEntries() {
			out = append(out, e.GetSnapshot())
		}
		if token = resp.GetNextToken(); token == "" {
			return out, nil
		}
	}
}

// HasSnapshot tells whether the backend lists the snapshot with ID id.
func (c *CSI) HasSnapshot(ctx context.Context, id string) (bool, error) {
	snaps, err := c.ListSnapshots(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(snaps, func(s *csi.Snapshot) bool { return s.GetSnapshotId() == id }), nil
}

// VolumePath is the folder that holds a filesystem volume's data on the driver's side.
func (c *CSI) VolumePath(id string) string { return filepath.Join(c.dataDir, "volumes", id) }

// CreateSnapshot takes a backend snapshot of a volume directly, as an admin would before
// pre-provisioning a content for it, and returns its ID once it is ready.
func (c *CSI) CreateSnapshot(ctx context.Context, name, volumeID string) (string, error) {
	resp, err := c.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID})
	if err != nil {
		return "", fmt.Errorf("CreateSnapshot %s: %w", name, err)
	}
	if !resp.GetSnapshot().GetReadyToUse() {
		return "", fmt.Errorf("CreateSnapshot %s: not ready to use", name)
	}
	return resp.GetSnapshot().GetSnapshotId(), nil
}
