//go:build linux

package hostpath

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// onNode1 is the accessibility requirement the provisioner sends for a claim the scheduler put
// on node-1 (the test driver's node).
var onNode1 = &csi.TopologyRequirement{
	Requisite: []*csi.Topology{{Segments: map[string]string{TopologyKey: "node-1"}}, {Segments: map[string]string{TopologyKey: "node-2"}}},
	Preferred: []*csi.Topology{{Segments: map[string]string{TopologyKey: "node-1"}}},
}

// TestRestoreFromAnotherNode: with topology, a restore or clone whose source this node does not
// hold is ResourceExhausted, saying so (the provisioner then asks the scheduler for another
// node, where the source may be); without accessibility requirements, or without topology, a
// missing source stays NotFound. A restore from a snapshot of this node works and carries the
// node's topology.
func TestRestoreFromAnotherNode(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.EnableTopology = true })
	for _, tc := range []struct {
		name   string
		source *csi.VolumeContentSource
		req    *csi.TopologyRequirement
		want   codes.Code
	}{
		{name: "snapshot elsewhere", req: onNode1, want: codes.ResourceExhausted,
			source: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-other"}}}},
		{name: "volume elsewhere", req: onNode1, want: codes.ResourceExhausted,
			source: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "vol-other"}}}},
		{name: "no requirements", want: codes.NotFound,
			source: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-other"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
				Name: "r-" + tc.name, VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
				VolumeContentSource: tc.source, AccessibilityRequirements: tc.req,
			})
			wantCode(t, err, tc.want)
			if tc.want == codes.ResourceExhausted && !strings.Contains(status.Convert(err).Message(), "not on node node-1") {
				t.Errorf("message %q does not name the node", status.Convert(err).Message())
			}
		})
	}
	vol := e.createVolume(t, "src", 1<<20, mountCap())
	snap, err := e.ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: vol.GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	restored, err := e.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "restored", VolumeCapabilities: []*csi.VolumeCapability{mountCap()}, AccessibilityRequirements: onNode1,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if top := restored.GetVolume().GetAccessibleTopology(); len(top) != 1 || top[0].GetSegments()[TopologyKey] != "node-1" {
		t.Errorf("restored volume's topology %v, want node-1", top)
	}

	plain := newTestEnv(t)
	_, err = plain.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "r", VolumeCapabilities: []*csi.VolumeCapability{mountCap()}, AccessibilityRequirements: onNode1,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-other"}}},
	})
	wantCode(t, err, codes.NotFound)
}

// TestGroupSnapshotAcrossNodes: with topology, a group naming volumes of this node and volumes
// it does not hold fails at once with FailedPrecondition naming both and the node, leaving
// nothing behind; without topology it is NotFound, as before.
func TestGroupSnapshotAcrossNodes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		topology bool
		want     codes.Code
	}{
		{name: "topology", topology: true, want: codes.FailedPrecondition},
		{name: "no topology", want: codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, func(o *Options) { o.EnableTopology = tc.topology })
			a := e.createVolume(t, "ga", 1<<20, mountCap())
			_, err := e.group.CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{
				Name: "g", SourceVolumeIds: []string{a.GetVolumeId(), "vol-on-node-2"},
			})
			wantCode(t, err, tc.want)
			msg := status.Convert(err).Message()
			if tc.topology {
				for _, want := range []string{"vol-on-node-2", "node node-1", a.GetVolumeId(), "one node"} {
					if !strings.Contains(msg, want) {
						t.Errorf("message %q lacks %q", msg, want)
					}
				}
			}
			if snaps := e.d.snapshots.List(); len(snaps) != 0 {
				t.Fatalf("failed group left snapshots %v", snaps)
			}
		})
	}
}
