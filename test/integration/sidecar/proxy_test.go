package sidecar

import (
	"context"
	"maps"
	"net"
	"os"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// proxy stands between the sidecar and the driver: it forwards the calls the sidecar makes,
// remembers the secrets each method got, and can answer CreateSnapshot late (after the driver
// has done the work), as a slow backend would.
type proxy struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedGroupControllerServer
	id    csi.IdentityClient
	ctrl  csi.ControllerClient
	group csi.GroupControllerClient

	mu      sync.Mutex
	late    int           // so many of the next CreateSnapshot calls answer only once the caller gave up
	hold    chan struct{} // when set, CreateSnapshot answers only once it is closed
	secrets map[string]map[string]string
	creates int

	srv *grpc.Server
}

func startProxy(t *testing.T, path, target string) *proxy {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p := &proxy{id: csi.NewIdentityClient(conn), ctrl: csi.NewControllerClient(conn), group: csi.NewGroupControllerClient(conn),
		secrets: map[string]map[string]string{}}
	p.serve(t, path)
	return p
}

func (p *proxy) serve(t *testing.T, path string) {
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p.srv = grpc.NewServer()
	csi.RegisterIdentityServer(p.srv, p)
	csi.RegisterControllerServer(p.srv, p)
	csi.RegisterGroupControllerServer(p.srv, p)
	go func() { _ = p.srv.Serve(lis) }()
	t.Cleanup(p.srv.Stop)
}

// restart stops serving (the sidecar's in-flight calls fail and its connection drops), calls
// between, and serves again on the same socket.
func (p *proxy) restart(t *testing.T, path string, between func()) {
	p.srv.Stop()
	between()
	p.serve(t, path)
}

// answerLate makes the next n CreateSnapshot calls time out: the driver does the work, and the
// answer waits until the caller has given up.
func (p *proxy) answerLate(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.late += n
}

func (p *proxy) secretsOf(method string) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.secrets[method]
}

func (p *proxy) record(method string, secrets map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.secrets[method] = maps.Clone(secrets)
}

func (p *proxy) GetPluginInfo(ctx context.Context, r *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return p.id.GetPluginInfo(ctx, r)
}

func (p *proxy) GetPluginCapabilities(ctx context.Context, r *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return p.id.GetPluginCapabilities(ctx, r)
}

func (p *proxy) Probe(ctx context.Context, r *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return p.id.Probe(ctx, r)
}

func (p *proxy) ControllerGetCapabilities(ctx context.Context, r *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return p.ctrl.ControllerGetCapabilities(ctx, r)
}

func (p *proxy) CreateSnapshot(ctx context.Context, r *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	p.record("CreateSnapshot", r.GetSecrets())
	p.mu.Lock()
	p.creates++
	late := p.late > 0
	if late {
		p.late--
	}
	hold := p.hold
	p.mu.Unlock()
	// The driver does the work with a context of its own: the caller's may expire first.
	resp, err := p.ctrl.CreateSnapshot(context.WithoutCancel(ctx), r)
	if late {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return resp, err
}

func (p *proxy) DeleteSnapshot(ctx context.Context, r *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	p.record("DeleteSnapshot", r.GetSecrets())
	return p.ctrl.DeleteSnapshot(ctx, r)
}

func (p *proxy) ListSnapshots(ctx context.Context, r *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	p.record("ListSnapshots", r.GetSecrets())
	return p.ctrl.ListSnapshots(ctx, r)
}

func (p *proxy) GetSnapshot(ctx context.Context, r *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	p.record("GetSnapshot", r.GetSecrets())
	return p.ctrl.GetSnapshot(ctx, r)
}

func (p *proxy) GroupControllerGetCapabilities(ctx context.Context, r *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	return p.group.GroupControllerGetCapabilities(ctx, r)
}

func (p *proxy) CreateVolumeGroupSnapshot(ctx context.Context, r *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	return p.group.CreateVolumeGroupSnapshot(ctx, r)
}

func (p *proxy) DeleteVolumeGroupSnapshot(ctx context.Context, r *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	return p.group.DeleteVolumeGroupSnapshot(ctx, r)
}

func (p *proxy) GetVolumeGroupSnapshot(ctx context.Context, r *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	return p.group.GetVolumeGroupSnapshot(ctx, r)
}
