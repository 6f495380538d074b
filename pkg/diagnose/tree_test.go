package diagnose

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/shutter-csi/shutter/pkg/protocol"
)

// TestLeaseNodes pins the states and details of the driver and controller nodes describe shows.
func TestLeaseNodes(t *testing.T) {
	live := holder{Lease: "kube-system/l", LeaseState: protocol.LeaseState{Live: true, Holder: "pod-a", SinceRenewal: 3 * time.Second}}
	dead := holder{Lease: "kube-system/l", LeaseState: protocol.LeaseState{Holder: "pod-a", SinceRenewal: 7 * time.Minute}}
	deadNoHolder := holder{Lease: "kube-system/l", LeaseState: protocol.LeaseState{SinceRenewal: 7 * time.Minute}}
	unreadable := holder{Err: errors.New("leases are forbidden")}
	for _, tc := range []struct {
		name        string
		node        *Node
		wantState   string
		wantDetails []string
	}{
		{"driver unknown", driverNode("", live), "Unknown", nil},
		{"driver leases unreadable", driverNode("d", unreadable), "Unknown", []string{"leases are forbidden"}},
		{"driver without sidecar", driverNode("d", holder{}), "NoSidecar",
			[]string{"no sidecar Lease external-snapshotter-leader-d or shutter-snapshotter-d in a namespace where a csi-snapshotter can run"}},
		{"driver with only a tenant's Lease", driverNode("d", holder{Ignored: []string{"tenant/shutter-snapshotter-d"}}), "NoSidecar",
			[]string{"no sidecar Lease external-snapshotter-leader-d or shutter-snapshotter-d in a namespace where a csi-snapshotter can run",
				"not counted: Lease tenant/shutter-snapshotter-d, in a namespace where the component cannot run (--lease-namespaces adds one)"}},
		{"driver, RBAC unreadable", driverNode("d", holder{TrustErr: errors.New("cannot read ClusterRoles: forbidden")}), "NoSidecar",
			[]string{"no sidecar Lease external-snapshotter-leader-d or shutter-snapshotter-d in a namespace where a csi-snapshotter can run",
				"only the Leases of kube-system and --lease-namespaces count: cannot read ClusterRoles: forbidden"}},
		{"driver with a Lease renewed in 2099", driverNode("d", holder{Lease: "kube-system/l", LeaseState: protocol.LeaseState{Holder: "pod-a", Future: true}}),
			"NoSidecar", []string{"sidecar Lease kube-system/l held by pod-a claims a renewal in the future, which no running component makes: not counted"}},
		{"driver with dead sidecar", driverNode("d", dead), "NoSidecar",
			[]string{"sidecar Lease kube-system/l last held by pod-a, not renewed for 7m"}},
		{"driver with live sidecar", driverNode("d", live), "SidecarLive",
			[]string{"sidecar Lease kube-system/l held by pod-a, renewed 3s ago"}},
		{"controller leases unreadable", controllerNode(unreadable), "Unknown", []string{"leases are forbidden"}},
		{"controller without Lease", controllerNode(holder{}), "NoLease",
			[]string{"no Lease snapshot-controller-leader (a controller without leader election holds none)"}},
		{"controller without leader", controllerNode(deadNoHolder), "NoLeader",
			[]string{"Lease kube-system/l last held by <none>, not renewed for 7m"}},
		{"controller leading", controllerNode(live), "Leading", []string{"Lease kube-system/l held by pod-a, renewed 3s ago"}},
	} {
		if tc.node.State != tc.wantState || !slices.Equal(tc.node.Details, tc.wantDetails) {
			t.Errorf("%s: state %q details %q, want %q %q", tc.name, tc.node.State, tc.node.Details, tc.wantState, tc.wantDetails)
		}
	}
}

// TestDiagnosisJSON: describe's JSON has the item's fields at the top, next to the tree.
func TestDiagnosisJSON(t *testing.T) {
	d := Diagnosis{Item: Item{Kind: "VolumeSnapshot", Name: "s", Phase: "Pending", Age: "1m", AgeSeconds: 60, Rule: RuleNoSidecar, Reason: "r"},
		Tree: &Node{Kind: "VolumeSnapshot", Name: "s", State: "Pending"}}
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"VolumeSnapshot","name":"s","phase":"Pending","age":"1m","ageSeconds":60,"rule":"` + string(RuleNoSidecar) +
		`","reason":"r","tree":{"kind":"VolumeSnapshot","name":"s","state":"Pending"}}`
	if string(data) != want {
		t.Errorf("got  %s\nwant %s", data, want)
	}
}
