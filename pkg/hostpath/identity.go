//go:build linux

package hostpath

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identityServer implements the CSI Identity service.
type identityServer struct {
	csi.UnimplementedIdentityServer
	d *Driver
}

// GetPluginInfo reports the configured driver name and version.
func (s *identityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: s.d.opts.DriverName, VendorVersion: s.d.opts.Version}, nil
}

// GetPluginCapabilities lists the services and features the driver offers.
func (s *identityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	services := []csi.PluginCapability_Service_Type{
		csi.PluginCapability_Service_CONTROLLER_SERVICE,
		csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE,
	}
	if s.d.opts.EnableTopology {
		// SNAPSHOT_ACCESSIBILITY_CONSTRAINTS is not offered: snapshots are
		// restored only as volumes, which carry the node's topology.
		services = append(services, csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS)
	}
	if s.d.opts.EnableSnapshotMetadata {
		services = append(services, csi.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE)
	}
	caps := make([]*csi.PluginCapability, 0, len(services)+1)
	for _, t := range services {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: t},
		}})
	}
	caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE},
	}})
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe reports ready once the driver has recovered its state, which New
// does before anything is served.
func (s *identityServer) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
