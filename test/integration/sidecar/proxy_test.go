package sidecar

import (
	"context"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// proxy stands between the sidecar and the driver: it passes every call on to the driver
// unread, remembers the secrets each snapshot method got, and can answer CreateSnapshot late
// (after the driver has done the work), as a slow backend would.
type proxy struct {
	driver *grpc.ClientConn

	mu      sync.Mutex
	late    int           // so many of the next CreateSnapshot calls answer only once the caller gave up
	hold    chan struct{} // when set, CreateSnapshot answers only once it is closed
	secrets map[string]map[string]string
	creates int

	srv *grpc.Server
}

// secretsRequest is a CSI request that carries secrets.
type secretsRequest interface {
	proto.Message
	GetSecrets() map[string]string
}

// withSecrets makes an empty request of each method whose secrets the proxy remembers.
var withSecrets = map[string]func() secretsRequest{
	csi.Controller_CreateSnapshot_FullMethodName: func() secretsRequest { return &csi.CreateSnapshotRequest{} },
	csi.Controller_DeleteSnapshot_FullMethodName: func() secretsRequest { return &csi.DeleteSnapshotRequest{} },
	csi.Controller_ListSnapshots_FullMethodName:  func() secretsRequest { return &csi.ListSnapshotsRequest{} },
	csi.Controller_GetSnapshot_FullMethodName:    func() secretsRequest { return &csi.GetSnapshotRequest{} },
}

func startProxy(t *testing.T, path, target string) *proxy {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p := &proxy{driver: conn, secrets: map[string]map[string]string{}}
	p.serve(t, path)
	return p
}

// serve answers every method through forward, since the proxy registers no service.
func (p *proxy) serve(t *testing.T, path string) {
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p.srv = grpc.NewServer(grpc.UnknownServiceHandler(p.forward), grpc.ForceServerCodec(frameCodec{}))
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

// secretsOf returns the secrets of the last call of method (its full name).
func (p *proxy) secretsOf(method string) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.secrets[method]
}

// forward passes one unary call on to the driver.
func (p *proxy) forward(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	var req frame
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	if err := p.record(method, req); err != nil {
		return err
	}
	call := func(ctx context.Context) (frame, error) {
		var resp frame
		err := p.driver.Invoke(ctx, method, &req, &resp, grpc.ForceCodec(frameCodec{}))
		return resp, err
	}
	var resp frame
	var err error
	if method == csi.Controller_CreateSnapshot_FullMethodName {
		resp, err = p.createSnapshot(stream.Context(), call)
	} else {
		resp, err = call(stream.Context())
	}
	if err != nil {
		return err
	}
	return stream.SendMsg(&resp)
}

// record remembers the secrets of a request of the methods in withSecrets.
func (p *proxy) record(method string, req frame) error {
	newRequest, ok := withSecrets[method]
	if !ok {
		return nil
	}
	r := newRequest()
	if err := proto.Unmarshal(req, r); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.secrets[method] = maps.Clone(r.GetSecrets())
	return nil
}

// createSnapshot makes the driver's CreateSnapshot call, answering late or held as the test
// asked.
func (p *proxy) createSnapshot(ctx context.Context, call func(context.Context) (frame, error)) (frame, error) {
	p.mu.Lock()
	p.creates++
	late := p.late > 0
	if late {
		p.late--
	}
	hold := p.hold
	p.mu.Unlock()
	// The driver does the work with a context of its own: the caller's may expire first.
	resp, err := call(context.WithoutCancel(ctx))
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

// frame is an encoded message that the proxy passes on unread.
type frame []byte

// frameCodec encodes and decodes frames as they are.
type frameCodec struct{}

func (frameCodec) Marshal(v any) ([]byte, error) { return *v.(*frame), nil }

func (frameCodec) Unmarshal(data []byte, v any) error {
	*v.(*frame) = slices.Clone(data)
	return nil
}

func (frameCodec) Name() string { return "proto" }
