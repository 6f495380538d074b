package csi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// ConnectOptions configure the connection to a driver.
type ConnectOptions struct {
	// Address is the driver's Unix socket, as a path or unix:///path.
	Address string
	// Timeout bounds every call, including each readiness probe.
	Timeout time.Duration
	// Metrics records every RPC's duration and code; nil records nothing.
	Metrics metrics.CSIMetricsManager
}

// GRPC is the Client on a gRPC connection to a driver.
type GRPC struct {
	conn       *grpc.ClientConn
	name       string
	caps       Capabilities
	controller csi.ControllerClient
	group      csi.GroupControllerClient
}

var _ Client = (*GRPC)(nil)

// Connect connects to the driver, waits until it is ready, reads its name and checks that it
// can create and delete snapshots. Every failure is returned with a message that says what to
// fix; the connection is closed again on failure.
func Connect(ctx context.Context, opts ConnectOptions) (*GRPC, error) {
	return dial(ctx, opts, newGRPC, (*GRPC).DriverName)
}

// dial connects to the driver at opts.Address and builds a client on the connection; the
// connection is closed again when build fails. The metrics learn the driver's name.
func dial[T any](ctx context.Context, opts ConnectOptions, build func(context.Context, *grpc.ClientConn, ConnectOptions) (T, error), name func(T) string) (T, error) {
	var none T
	if opts.Timeout <= 0 {
		opts.Timeout = time.Minute
	}
	conn, err := connection.Connect(ctx, opts.Address, opts.Metrics, connection.OnConnectionLoss(func(ctx context.Context) bool {
		klog.FromContext(ctx).Info("Lost connection to the CSI driver, reconnecting", "address", opts.Address)
		return true
	}))
	if err != nil {
		return none, fmt.Errorf("connect to CSI driver at %s: %w", opts.Address, err)
	}
	c, err := build(ctx, conn, opts)
	if err != nil {
		_ = conn.Close()
		return none, err
	}
	if opts.Metrics != nil {
		opts.Metrics.SetDriverName(name(c))
	}
	return c, nil
}

func newGRPC(ctx context.Context, conn *grpc.ClientConn, opts ConnectOptions) (*GRPC, error) {
	logged := &loggedConn{ClientConnInterface: conn, timeout: opts.Timeout}
	c := &GRPC{conn: conn, controller: csi.NewControllerClient(logged), group: csi.NewGroupControllerClient(logged)}
	name, err := probeName(ctx, conn, opts)
	if err != nil {
		return nil, err
	}
	c.name = name
	callCtx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if c.caps, err = capabilities(callCtx, conn); err != nil {
		return nil, fmt.Errorf("CSI driver %s: %w", name, err)
	}
	if !c.caps.CreateDeleteSnapshot {
		return nil, fmt.Errorf("CSI driver %s does not offer the CREATE_DELETE_SNAPSHOT controller capability: it cannot take snapshots", name)
	}
	klog.FromContext(ctx).Info("Connected to CSI driver", "driver", name, "capabilities", c.caps)
	return c, nil
}

// probeName waits until the driver is ready and reads its name.
func probeName(ctx context.Context, conn *grpc.ClientConn, opts ConnectOptions) (string, error) {
	if err := rpc.ProbeForever(ctx, conn, opts.Timeout); err != nil {
		return "", fmt.Errorf("CSI driver at %s is not ready: %w", opts.Address, err)
	}
	callCtx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	name, err := rpc.GetDriverName(callCtx, conn)
	if err != nil {
		return "", fmt.Errorf("read the CSI driver's name (GetPluginInfo): %w", err)
	}
	return name, nil
}

// capabilities reads the controller capabilities and, when the driver offers the group
// controller service, its group capabilities.
func capabilities(ctx context.Context, conn *grpc.ClientConn) (Capabilities, error) {
	plugin, err := rpc.GetPluginCapabilities(ctx, conn)
	if err != nil {
		return Capabilities{}, fmt.Errorf("GetPluginCapabilities: %w", err)
	}
	if !plugin[csi.PluginCapability_Service_CONTROLLER_SERVICE] {
		return Capabilities{}, errors.New("the driver does not offer the CSI controller service")
	}
	ctrl, err := rpc.GetControllerCapabilities(ctx, conn)
	if err != nil {
		return Capabilities{}, fmt.Errorf("ControllerGetCapabilities: %w", err)
	}
	caps := Capabilities{
		CreateDeleteSnapshot: ctrl[csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT],
		ListSnapshots:        ctrl[csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS],
		GetSnapshot:          ctrl[csi.ControllerServiceCapability_RPC_GET_SNAPSHOT],
	}
	if plugin[csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE] {
		group, err := rpc.GetGroupControllerCapabilities(ctx, conn)
		if err != nil {
			return Capabilities{}, fmt.Errorf("GroupControllerGetCapabilities: %w", err)
		}
		caps.GroupSnapshots = group[csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT]
	}
	return caps, nil
}

// Close closes the connection.
func (c *GRPC) Close() error { return c.conn.Close() }

// DriverName implements Client.
func (c *GRPC) DriverName() string { return c.name }

// Capabilities implements Client.
func (c *GRPC) Capabilities() Capabilities { return c.caps }

// CreateSnapshot implements Client.
func (c *GRPC) CreateSnapshot(ctx context.Context, req CreateSnapshotRequest) (*Snapshot, error) {
	resp, err := c.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{
		Name: req.Name, SourceVolumeId: req.SourceVolumeID, Parameters: req.Parameters, Secrets: req.Secrets,
	})
	if err := checkCreated("CreateSnapshot", "snapshot", resp.GetSnapshot().GetSnapshotId(), err); err != nil {
		return nil, err
	}
	return snapshot(resp.GetSnapshot()), nil
}

// checkCreated returns the error of a create call, or Internal when the call
// succeeded without naming the ID of what it created.
func checkCreated(rpc, what, id string, err error) error {
	if err == nil && id == "" {
		return status.Errorf(codes.Internal, "%s returned no %s id", rpc, what)
	}
	return err
}

// DeleteSnapshot implements Client.
func (c *GRPC) DeleteSnapshot(ctx context.Context, id string, secrets map[string]string) error {
	_, err := c.controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: secrets})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}

// GetSnapshot implements Client.
func (c *GRPC) GetSnapshot(ctx context.Context, id string, secrets map[string]string) (*Snapshot, error) {
	switch {
	case c.caps.GetSnapshot:
		resp, err := c.controller.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: id, Secrets: secrets})
		if status.Code(err) == codes.NotFound {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return snapshot(resp.GetSnapshot()), nil
	case c.caps.ListSnapshots:
		resp, err := c.controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: id, Secrets: secrets})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetEntries() {
			if e.GetSnapshot().GetSnapshotId() == id {
				return snapshot(e.GetSnapshot()), nil
			}
		}
		return nil, nil
	default:
		return nil, fmt.Errorf("reading snapshot %s needs the LIST_SNAPSHOTS or GET_SNAPSHOT capability: %w", id, errNotSupported)
	}
}

// CreateGroupSnapshot implements Client.
func (c *GRPC) CreateGroupSnapshot(ctx context.Context, req CreateGroupSnapshotRequest) (*GroupSnapshot, error) {
	if !c.caps.GroupSnapshots {
		return nil, fmt.Errorf("group snapshots: %w", errNotSupported)
	}
	resp, err := c.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{
		Name: req.Name, SourceVolumeIds: req.SourceVolumeIDs, Parameters: req.Parameters, Secrets: req.Secrets,
	})
	if err := checkCreated("CreateVolumeGroupSnapshot", "group snapshot", resp.GetGroupSnapshot().GetGroupSnapshotId(), err); err != nil {
		return nil, err
	}
	return groupSnapshot(resp.GetGroupSnapshot()), nil
}

// DeleteGroupSnapshot implements Client.
func (c *GRPC) DeleteGroupSnapshot(ctx context.Context, id string, snapshotIDs []string, secrets map[string]string) error {
	if !c.caps.GroupSnapshots {
		return fmt.Errorf("group snapshots: %w", errNotSupported)
	}
	_, err := c.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{
		GroupSnapshotId: id, SnapshotIds: snapshotIDs, Secrets: secrets,
	})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}

// GetGroupSnapshot implements Client.
func (c *GRPC) GetGroupSnapshot(ctx context.Context, id string, snapshotIDs []string, secrets map[string]string) (*GroupSnapshot, error) {
	if !c.caps.GroupSnapshots {
		return nil, fmt.Errorf("group snapshots: %w", errNotSupported)
	}
	resp, err := c.group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{
		GroupSnapshotId: id, SnapshotIds: snapshotIDs, Secrets: secrets,
	})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return groupSnapshot(resp.GetGroupSnapshot()), nil
}

func snapshot(s *csi.Snapshot) *Snapshot {
	out := &Snapshot{
		ID: s.GetSnapshotId(), SourceVolumeID: s.GetSourceVolumeId(), GroupID: s.GetGroupSnapshotId(),
		SizeBytes: s.GetSizeBytes(), ReadyToUse: s.GetReadyToUse(),
	}
	if s.GetCreationTime() != nil {
		out.CreationTime = s.GetCreationTime().AsTime()
	}
	return out
}

func groupSnapshot(g *csi.VolumeGroupSnapshot) *GroupSnapshot {
	out := &GroupSnapshot{ID: g.GetGroupSnapshotId(), ReadyToUse: g.GetReadyToUse()}
	if g.GetCreationTime() != nil {
		out.CreationTime = g.GetCreationTime().AsTime()
	}
	for _, s := range g.GetSnapshots() {
		out.Snapshots = append(out.Snapshots, *snapshot(s))
	}
	return out
}
