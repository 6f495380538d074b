package csi

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// testDriver is a small CSI server for the client's tests.
type testDriver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedGroupControllerServer

	ctrlCaps    []csi.ControllerServiceCapability_RPC_Type
	group       bool
	notReadyFor int32 // probes answered "not ready" before "ready"
	probes      atomic.Int32
	delay       time.Duration
	createErr   error
	// noID makes creates succeed without naming what they created.
	noID bool

	mu      sync.Mutex
	secrets map[string]string
}

func (d *testDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: "test.csi.shutter.dev", VendorVersion: "1"}, nil
}

func (d *testDriver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	types := []csi.PluginCapability_Service_Type{csi.PluginCapability_Service_CONTROLLER_SERVICE}
	if d.group {
		types = append(types, csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE)
	}
	resp := &csi.GetPluginCapabilitiesResponse{}
	for _, t := range types {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}})
	}
	return resp, nil
}

func (d *testDriver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	n := d.probes.Add(1)
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(n > d.notReadyFor)}, nil
}

func (d *testDriver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range d.ctrlCaps {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return resp, nil
}

func (d *testDriver) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	return &csi.GroupControllerGetCapabilitiesResponse{Capabilities: []*csi.GroupControllerServiceCapability{{
		Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{
			Type: csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT}},
	}}}, nil
}

var created = time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)

func (d *testDriver) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	d.mu.Lock()
	d.secrets = req.GetSecrets()
	d.mu.Unlock()
	select {
	case <-time.After(d.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if d.createErr != nil {
		return nil, d.createErr
	}
	if d.noID {
		return &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SourceVolumeId: req.GetSourceVolumeId()}}, nil
	}
	return &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{
		SnapshotId: "id-" + req.GetName(), SourceVolumeId: req.GetSourceVolumeId(), SizeBytes: 42,
		CreationTime: timestamppb.New(created), ReadyToUse: true,
	}}, nil
}

func (d *testDriver) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "gone" {
		return nil, status.Error(codes.NotFound, "gone")
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

func (d *testDriver) known(id string) *csi.Snapshot {
	if id != "known" {
		return nil
	}
	return &csi.Snapshot{SnapshotId: id, SourceVolumeId: "vol", SizeBytes: 7, CreationTime: timestamppb.New(created)}
}

func (d *testDriver) GetSnapshot(_ context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	if s := d.known(req.GetSnapshotId()); s != nil {
		return &csi.GetSnapshotResponse{Snapshot: s}, nil
	}
	return nil, status.Error(codes.NotFound, "unknown")
}

func (d *testDriver) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	resp := &csi.ListSnapshotsResponse{}
	if s := d.known(req.GetSnapshotId()); s != nil {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: s})
	}
	return resp, nil
}

func (d *testDriver) CreateVolumeGroupSnapshot(_ context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	if d.noID {
		return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: &csi.VolumeGroupSnapshot{}}, nil
	}
	g := &csi.VolumeGroupSnapshot{GroupSnapshotId: "g-" + req.GetName(), CreationTime: timestamppb.New(created), ReadyToUse: true}
	for _, v := range req.GetSourceVolumeIds() {
		g.Snapshots = append(g.Snapshots, &csi.Snapshot{SnapshotId: "s-" + v, SourceVolumeId: v, GroupSnapshotId: g.GroupSnapshotId, ReadyToUse: true})
	}
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: g}, nil
}

func (d *testDriver) GetVolumeGroupSnapshot(_ context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	if req.GetGroupSnapshotId() != "g-known" {
		return nil, status.Error(codes.NotFound, "unknown")
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: &csi.VolumeGroupSnapshot{GroupSnapshotId: "g-known", ReadyToUse: true}}, nil
}

func (d *testDriver) DeleteVolumeGroupSnapshot(context.Context, *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	return nil, status.Error(codes.NotFound, "unknown")
}

// serve starts d on a fresh Unix socket and returns its path.
func serve(t *testing.T, d *testDriver) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "csi.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterControllerServer(srv, d)
	csi.RegisterGroupControllerServer(srv, d)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return path
}

var allCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
}

func connect(t *testing.T, d *testDriver, timeout time.Duration) *GRPC {
	t.Helper()
	c, err := Connect(t.Context(), ConnectOptions{Address: "unix://" + serve(t, d), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConnect(t *testing.T) {
	tests := []struct {
		name     string
		driver   *testDriver
		wantCaps Capabilities
		wantErr  string
	}{
		{name: "all", driver: &testDriver{ctrlCaps: allCaps, group: true},
			wantCaps: Capabilities{CreateDeleteSnapshot: true, ListSnapshots: true, GetSnapshot: true, GroupSnapshots: true}},
		{name: "create only, not ready at first", driver: &testDriver{ctrlCaps: allCaps[:1], notReadyFor: 1},
			wantCaps: Capabilities{CreateDeleteSnapshot: true}},
		{name: "no snapshots", driver: &testDriver{ctrlCaps: allCaps[1:]}, wantErr: "does not offer the CREATE_DELETE_SNAPSHOT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := metrics.NewCSIMetricsManagerForSidecar("")
			c, err := Connect(t.Context(), ConnectOptions{Address: serve(t, tc.driver), Timeout: 5 * time.Second, Metrics: reg})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want error %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.DriverName() != "test.csi.shutter.dev" || c.Capabilities() != tc.wantCaps {
				t.Errorf("got %s %+v, want %+v", c.DriverName(), c.Capabilities(), tc.wantCaps)
			}
			if _, err := c.CreateSnapshot(t.Context(), CreateSnapshotRequest{Name: "a", SourceVolumeID: "v"}); err != nil {
				t.Fatal(err)
			}
			families, err := reg.GetRegistry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			recorded := false
			for _, f := range families {
				recorded = recorded || (f.GetName() == "csi_sidecar_operations_seconds" && strings.Contains(f.String(), "CreateSnapshot"))
			}
			if !recorded {
				t.Error("no RPC metric recorded for CreateSnapshot")
			}
		})
	}
}

func TestConnectNoDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := Connect(ctx, ConnectOptions{Address: "/nonexistent/csi.sock", Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/csi.sock") {
		t.Fatalf("got %v, want an error naming the address", err)
	}
}

func TestSnapshotCalls(t *testing.T) {
	c := connect(t, &testDriver{ctrlCaps: allCaps, group: true}, 5*time.Second)
	ctx := t.Context()
	s, err := c.CreateSnapshot(ctx, CreateSnapshotRequest{Name: "n", SourceVolumeID: "v"})
	if err != nil {
		t.Fatal(err)
	}
	want := Snapshot{ID: "id-n", SourceVolumeID: "v", SizeBytes: 42, CreationTime: created, ReadyToUse: true}
	if *s != want {
		t.Errorf("CreateSnapshot = %+v, want %+v", *s, want)
	}
	if err := c.DeleteSnapshot(ctx, "gone", nil); err != nil {
		t.Errorf("DeleteSnapshot of an unknown id: %v", err)
	}
	if got, err := c.GetSnapshot(ctx, "known", nil); err != nil || got == nil || got.SizeBytes != 7 {
		t.Errorf("GetSnapshot(known) = %+v, %v", got, err)
	}
	if got, err := c.GetSnapshot(ctx, "other", nil); err != nil || got != nil {
		t.Errorf("GetSnapshot(other) = %+v, %v; want nil, nil", got, err)
	}
	g, err := c.CreateGroupSnapshot(ctx, CreateGroupSnapshotRequest{Name: "g", SourceVolumeIDs: []string{"a", "b"}})
	if err != nil || g.ID != "g-g" || len(g.Snapshots) != 2 || g.Snapshots[1].ID != "s-b" {
		t.Errorf("CreateGroupSnapshot = %+v, %v", g, err)
	}
	if got, err := c.GetGroupSnapshot(ctx, "g-other", nil, nil); err != nil || got != nil {
		t.Errorf("GetGroupSnapshot(other) = %+v, %v", got, err)
	}
	if err := c.DeleteGroupSnapshot(ctx, "g-other", nil, nil); err != nil {
		t.Errorf("DeleteGroupSnapshot of an unknown id: %v", err)
	}
}

func TestGetSnapshotByList(t *testing.T) {
	c := connect(t, &testDriver{ctrlCaps: allCaps[:2]}, 5*time.Second)
	if got, err := c.GetSnapshot(t.Context(), "known", nil); err != nil || got == nil {
		t.Errorf("GetSnapshot(known) by ListSnapshots = %+v, %v", got, err)
	}
	if got, err := c.GetSnapshot(t.Context(), "other", nil); err != nil || got != nil {
		t.Errorf("GetSnapshot(other) by ListSnapshots = %+v, %v", got, err)
	}
}

func TestNotSupported(t *testing.T) {
	c := connect(t, &testDriver{ctrlCaps: allCaps[:1]}, 5*time.Second)
	_, err := c.GetSnapshot(t.Context(), "known", nil)
	if Classify(err) != Failed || !strings.Contains(err.Error(), "LIST_SNAPSHOTS") {
		t.Errorf("GetSnapshot without capability: %v", err)
	}
	if _, err := c.CreateGroupSnapshot(t.Context(), CreateGroupSnapshotRequest{Name: "g"}); Classify(err) != Failed {
		t.Errorf("CreateGroupSnapshot without capability: %v", err)
	}
}

// TestCreateWithoutID: a create that succeeds without an ID is an Internal
// error, never a snapshot without a handle.
func TestCreateWithoutID(t *testing.T) {
	c := connect(t, &testDriver{ctrlCaps: allCaps, group: true, noID: true}, 5*time.Second)
	s, err := c.CreateSnapshot(t.Context(), CreateSnapshotRequest{Name: "n", SourceVolumeID: "v"})
	if status.Code(err) != codes.Internal || s != nil || err.Error() != "rpc error: code = Internal desc = CreateSnapshot returned no snapshot id" {
		t.Errorf("CreateSnapshot = %v, %v; want Internal, no snapshot id", s, err)
	}
	g, err := c.CreateGroupSnapshot(t.Context(), CreateGroupSnapshotRequest{Name: "g", SourceVolumeIDs: []string{"v"}})
	if status.Code(err) != codes.Internal || g != nil || err.Error() != "rpc error: code = Internal desc = CreateVolumeGroupSnapshot returned no group snapshot id" {
		t.Errorf("CreateGroupSnapshot = %v, %v; want Internal, no group snapshot id", g, err)
	}
}

func TestErrorsClassified(t *testing.T) {
	tests := []struct {
		name    string
		driver  *testDriver
		timeout time.Duration
		want    Outcome
	}{
		{name: "timeout", driver: &testDriver{ctrlCaps: allCaps, delay: time.Second}, timeout: 200 * time.Millisecond, want: InProgress},
		// The answers come at once; the long timeout keeps a loaded machine (-race) from
		// turning them into timeouts.
		{name: "final", driver: &testDriver{ctrlCaps: allCaps, createErr: status.Error(codes.InvalidArgument, "no")}, timeout: 10 * time.Second, want: Failed},
		{name: "aborted", driver: &testDriver{ctrlCaps: allCaps, createErr: status.Error(codes.Aborted, "busy")}, timeout: 10 * time.Second, want: Busy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := connect(t, tc.driver, tc.timeout)
			_, err := c.CreateSnapshot(t.Context(), CreateSnapshotRequest{Name: "n", SourceVolumeID: "v"})
			if got := Classify(err); got != tc.want {
				t.Errorf("Classify(%v) = %s, want %s", err, got, tc.want)
			}
		})
	}
}

func TestSecretsNotLogged(t *testing.T) {
	d := &testDriver{ctrlCaps: allCaps}
	c := connect(t, d, 5*time.Second)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(5), textlogger.Output(&lockedWriter{w: &buf, mu: &mu})))
	ctx := klog.NewContext(t.Context(), logger)
	secret := "hunter2-very-secret"
	if _, err := c.CreateSnapshot(ctx, CreateSnapshotRequest{Name: "n", SourceVolumeID: "v", Secrets: map[string]string{"password": secret}}); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	got := d.secrets["password"]
	d.mu.Unlock()
	if got != secret {
		t.Fatalf("driver got secret %q, want %q", got, secret)
	}
	mu.Lock()
	defer mu.Unlock()
	out := buf.String()
	if !strings.Contains(out, "CreateSnapshot") || !strings.Contains(out, "CSI request") {
		t.Fatalf("nothing logged at V(5):\n%s", out)
	}
	if strings.Contains(out, secret) {
		t.Fatalf("secret logged:\n%s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
