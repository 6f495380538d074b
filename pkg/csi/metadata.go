package csi

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

// Metadata is a connection to a driver's CSI SnapshotMetadata service, for the snapshot-metadata
// sidecar. Its streams are not bounded by the connect timeout: a stream lasts as long as its
// caller's context.
type Metadata struct {
	csi.SnapshotMetadataClient
	conn *grpc.ClientConn
	name string
}

// ConnectMetadata connects to the driver, waits until it is ready, reads its name and checks that
// it offers the SNAPSHOT_METADATA_SERVICE plugin capability. A lost connection is re-established.
func ConnectMetadata(ctx context.Context, opts ConnectOptions) (*Metadata, error) {
	return dial(ctx, opts, newMetadata, (*Metadata).DriverName)
}

func newMetadata(ctx context.Context, conn *grpc.ClientConn, opts ConnectOptions) (*Metadata, error) {
	name, err := probeName(ctx, conn, opts)
	if err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	plugin, err := rpc.GetPluginCapabilities(callCtx, conn)
	if err != nil {
		return nil, fmt.Errorf("CSI driver %s: GetPluginCapabilities: %w", name, err)
	}
	if !plugin[csi.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE] {
		return nil, fmt.Errorf("CSI driver %s does not offer the SNAPSHOT_METADATA_SERVICE plugin capability", name)
	}
	klog.FromContext(ctx).Info("Connected to CSI driver", "driver", name, "service", "SnapshotMetadata")
	return &Metadata{SnapshotMetadataClient: csi.NewSnapshotMetadataClient(conn), conn: conn, name: name}, nil
}

// DriverName is the name the driver reported in GetPluginInfo.
func (m *Metadata) DriverName() string { return m.name }

// Close closes the connection.
func (m *Metadata) Close() error { return m.conn.Close() }
