package csitest

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shutter-csi/shutter/pkg/csi"
)

// TestCapabilitiesHonoured: each call that the capabilities rule out is answered
// codes.Unimplemented, which csi.Classify calls final, is recorded, and changes nothing; the
// same calls go through with the capability.
func TestCapabilitiesHonoured(t *testing.T) {
	ctx := context.Background()
	calls := []struct {
		method string
		call   func(*Fake) error
	}{
		{"CreateSnapshot", func(f *Fake) error {
			_, err := f.CreateSnapshot(ctx, csi.CreateSnapshotRequest{Name: "s", SourceVolumeID: "v"})
			return err
		}},
		{"DeleteSnapshot", func(f *Fake) error { return f.DeleteSnapshot(ctx, "snap-known", nil) }},
		{"GetSnapshot", func(f *Fake) error { _, err := f.GetSnapshot(ctx, "snap-known", nil); return err }},
		{"CreateGroupSnapshot", func(f *Fake) error {
			_, err := f.CreateGroupSnapshot(ctx, csi.CreateGroupSnapshotRequest{Name: "g", SourceVolumeIDs: []string{"v"}})
			return err
		}},
		{"DeleteGroupSnapshot", func(f *Fake) error { return f.DeleteGroupSnapshot(ctx, "group-known", nil, nil) }},
		{"GetGroupSnapshot", func(f *Fake) error { _, err := f.GetGroupSnapshot(ctx, "group-known", nil, nil); return err }},
	}
	tests := []struct {
		name    string
		caps    csi.Capabilities
		refused []string
	}{
		{name: "every capability", caps: csi.Capabilities{CreateDeleteSnapshot: true, ListSnapshots: true, GetSnapshot: true, GroupSnapshots: true}},
		{name: "read by list only", caps: csi.Capabilities{CreateDeleteSnapshot: true, ListSnapshots: true},
			refused: []string{"CreateGroupSnapshot", "DeleteGroupSnapshot", "GetGroupSnapshot"}},
		{name: "read by get only", caps: csi.Capabilities{CreateDeleteSnapshot: true, GetSnapshot: true, GroupSnapshots: true}},
		{name: "no reads", caps: csi.Capabilities{CreateDeleteSnapshot: true, GroupSnapshots: true}, refused: []string{"GetSnapshot"}},
		{name: "nothing", refused: []string{"CreateSnapshot", "DeleteSnapshot", "GetSnapshot",
			"CreateGroupSnapshot", "DeleteGroupSnapshot", "GetGroupSnapshot"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range calls {
				f := NewFake("test.csi")
				f.AddSnapshot(csi.Snapshot{ID: "snap-known", SourceVolumeID: "v"})
				f.groups["group-known"] = &csi.GroupSnapshot{ID: "group-known"}
				f.Caps = tc.caps
				if f.Capabilities() != tc.caps {
					t.Fatalf("Capabilities() = %+v, want %+v", f.Capabilities(), tc.caps)
				}
				err := c.call(f)
				refused := slices.Contains(tc.refused, c.method)
				switch {
				case refused && (status.Code(err) != codes.Unimplemented || csi.Classify(err) != csi.Failed):
					t.Errorf("%s without its capability: %v, want a final Unimplemented", c.method, err)
				case !refused && err != nil:
					t.Errorf("%s: %v", c.method, err)
				}
				if f.CountCalls(c.method) != 1 {
					t.Errorf("%s: %d calls recorded, want 1", c.method, f.CountCalls(c.method))
				}
				if refused && (len(f.SnapshotIDs()) != 1 || len(f.GroupIDs()) != 1) {
					t.Errorf("%s refused, yet the backend changed: snapshots %v, groups %v", c.method, f.SnapshotIDs(), f.GroupIDs())
				}
			}
		})
	}
}

// TestQueuedErrorsWaitForAllowedCalls: a refused call does not use up an error queued for the
// method.
func TestQueuedErrorsWaitForAllowedCalls(t *testing.T) {
	f := NewFake("test.csi")
	busy := status.Error(codes.Aborted, "busy")
	f.Errors["GetSnapshot"] = []error{busy}
	f.Caps.GetSnapshot, f.Caps.ListSnapshots = false, false
	if _, err := f.GetSnapshot(context.Background(), "x", nil); status.Code(err) != codes.Unimplemented {
		t.Fatalf("refused call: %v", err)
	}
	f.Caps.GetSnapshot = true
	if _, err := f.GetSnapshot(context.Background(), "x", nil); err != busy {
		t.Errorf("allowed call: %v, want the queued error", err)
	}
}
