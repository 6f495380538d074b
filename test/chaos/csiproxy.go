package main

import (
	"context"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// csiMode is what the CSI proxy does to the sidecar's calls while a fault lasts.
type csiMode int

const (
	csiPass csiMode = iota
	// csiDelay holds every call a while before passing it on.
	csiDelay
	// csiTimeout passes create and delete calls on, then drops the driver's answer and reports
	// DeadlineExceeded: the backend did the work, the sidecar does not know.
	csiTimeout
	// csiTransient answers half the calls Unavailable or Aborted without passing them on.
	csiTransient
	// csiFinal answers CreateSnapshot InvalidArgument without passing it on.
	csiFinal
)

// finalMessage marks the errors the proxy makes up as final, so the checks recognise them.
const finalMessage = "chaos: injected final error"

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// csiProxy is a gRPC proxy on a unix socket between the sidecar and the driver. It records
// every snapshot ID each CreateSnapshot name was answered with, injects faults, can drop every
// connection, and can kill the sidecar right after a CreateSnapshot succeeded.
type csiProxy struct {
	socket   string
	upstream *grpc.ClientConn
	mode     atomic.Int32
	delay    atomic.Int64
	counter  atomic.Uint64
	injected atomic.Uint64
	// killAfterCreate, when set, is called once (then cleared) after a successful
	// CreateSnapshot reply and before the reply goes back.
	killAfterCreate atomic.Pointer[func()]

	mu      sync.Mutex
	srv     *grpc.Server
	created map[string]map[string]bool // CreateSnapshot name -> snapshot IDs answered
}

func newCSIProxy(socket, driverSocket string) (*csiProxy, error) {
	conn, err := grpc.NewClient("unix://"+driverSocket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		return nil, err
	}
	p := &csiProxy{socket: socket, upstream: conn, created: map[string]map[string]bool{}}
	return p, p.serve()
}

func (p *csiProxy) serve() error {
	_ = os.Remove(p.socket)
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(p.handle))
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// drop closes every connection, as a driver restart or a broken socket would, and serves again.
func (p *csiProxy) drop() error {
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	srv.Stop()
	return p.serve()
}

func (p *csiProxy) close() {
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	srv.Stop()
	_ = p.upstream.Close()
}

func (p *csiProxy) set(mode csiMode, delay time.Duration) {
	p.delay.Store(int64(delay))
	p.mode.Store(int32(mode))
}

// mutating are the calls a timeout fault lets through and then hides the answer of.
var mutating = map[string]bool{
	"/csi.v1.Controller/CreateSnapshot": true, "/csi.v1.Controller/DeleteSnapshot": true,
	"/csi.v1.GroupController/CreateVolumeGroupSnapshot": true, "/csi.v1.GroupController/DeleteVolumeGroupSnapshot": true,
}

func (p *csiProxy) handle(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	var in []byte
	if err := stream.RecvMsg(&in); err != nil {
		return err
	}
	ctx := stream.Context()
	mode := csiMode(p.mode.Load())
	if err := p.before(ctx, method, mode); err != nil {
		return err
	}
	var out []byte
	if err := p.upstream.Invoke(ctx, method, &in, &out); err != nil {
		return err
	}
	p.record(method, in, out)
	if mode == csiTimeout && mutating[method] {
		p.injected.Add(1)
		return status.Error(codes.DeadlineExceeded, "chaos: answer dropped")
	}
	if method == "/csi.v1.Controller/CreateSnapshot" {
		if kill := p.killAfterCreate.Swap(nil); kill != nil {
			(*kill)()
			return status.Error(codes.Unavailable, "chaos: sidecar killed")
		}
	}
	return stream.SendMsg(&out)
}

// before applies the fault of mode to a call, before it reaches the driver.
func (p *csiProxy) before(ctx context.Context, method string, mode csiMode) error {
	probe := method == "/csi.v1.Identity/Probe" || method == "/csi.v1.Identity/GetPluginInfo" ||
		method == "/csi.v1.Identity/GetPluginCapabilities"
	switch {
	case mode == csiDelay:
		p.injected.Add(1)
		select {
		case <-time.After(time.Duration(p.delay.Load())):
		case <-ctx.Done():
			return ctx.Err()
		}
	case mode == csiTransient && !probe && p.counter.Add(1)%2 == 0:
		p.injected.Add(1)
		if p.counter.Load()%4 == 0 {
			return status.Error(codes.Aborted, "chaos: operation pending")
		}
		return status.Error(codes.Unavailable, "chaos: unavailable")
	case mode == csiFinal && method == "/csi.v1.Controller/CreateSnapshot":
		p.injected.Add(1)
		return status.Error(codes.InvalidArgument, finalMessage)
	}
	return nil
}

// record remembers the snapshot ID a CreateSnapshot name was answered with.
func (p *csiProxy) record(method string, in, out []byte) {
	if method != "/csi.v1.Controller/CreateSnapshot" {
		return
	}
	var req csi.CreateSnapshotRequest
	var resp csi.CreateSnapshotResponse
	if proto.Unmarshal(in, &req) != nil || proto.Unmarshal(out, &resp) != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := p.created[req.GetName()]
	if ids == nil {
		ids = map[string]bool{}
		p.created[req.GetName()] = ids
	}
	ids[resp.GetSnapshot().GetSnapshotId()] = true
}

// duplicates are the CreateSnapshot names that were answered with more than one snapshot ID.
func (p *csiProxy) duplicates() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]string{}
	for name, ids := range p.created {
		if len(ids) > 1 {
			for id := range ids {
				out[name] = append(out[name], id)
			}
		}
	}
	return out
}
