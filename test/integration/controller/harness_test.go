package controller

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/controller/controllertest"
	"github.com/shutter-csi/shutter/pkg/snapshot"
)

// The package runs one snapshot-controller. Tests that run alone (no t.Parallel) may restart it
// with every object present, hold back the events of its VolumeSnapshot watch, and wait until its
// queues processed a key: that is how they put the controller's view of events in a chosen order
// instead of sleeping and hoping.
var (
	running   = &runningController{}
	gate      = newWatchGate()
	processed = controllertest.NewSignals()
	failing   = &failOnce{}
)

// failOnce answers 500, once, to the first of the controller's requests that a test's predicate
// picks, without passing it on: a write the API server never saw.
type failOnce struct {
	mu   sync.Mutex
	pick func(*http.Request) bool
}

// fired tells whether the armed failure happened.
func (f *failOnce) fired() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pick == nil
}

// arm makes the next request for which pick holds fail.
func (f *failOnce) arm(pick func(*http.Request) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pick = pick
}

func (f *failOnce) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		f.mu.Lock()
		hit := f.pick != nil && f.pick(req)
		if hit {
			f.pick = nil
		}
		f.mu.Unlock()
		if !hit {
			return rt.RoundTrip(req)
		}
		return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
			Header: http.Header{"Content-Type": []string{"application/json"}}, Request: req,
			Body: io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500}`))}, nil
	})
}

// runningController is the package's controller, which can be stopped and started again.
type runningController struct {
	mu     sync.Mutex
	admin  *rest.Config
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs a new snapshot-controller, its writes counted, its snapshot watch behind the gate.
func (r *runningController) start(t *testing.T, admin *rest.Config) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.admin = admin
	cfg := rest.CopyConfig(admin)
	cfg.Wrap(writes.wrap)
	cfg.Wrap(gate.wrap)
	cfg.Wrap(failing.wrap)
	clients := snapshot.Clients{Kube: kubernetesFor(cfg), Snapshots: clientsetFor(cfg)}
	kubeInformers, snapInformers := snapshot.InformerFactories(clients)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: clients.Kube.CoreV1().Events("")})
	recorder := countingRecorder{broadcaster.NewRecorder(snapshot.EventScheme(), corev1.EventSource{Component: "snapshot-controller"}), writes}
	c, err := snapshot.New(clients, kubeInformers, snapInformers, recorder, snapshot.Options{
		Workers: 4, Retry: controller.Options{RetryStart: 100 * time.Millisecond, RetryMax: 2 * time.Second, Processed: processed.Hook},
		PreventVolumeModeConversion: true, StatusGrace: statusGrace,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	kubeInformers.Start(ctx.Done())
	snapInformers.Start(ctx.Done())
	if err := c.EnableGroups(ctx, snapInformers); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
		kubeInformers.Shutdown()
		snapInformers.Shutdown()
		broadcaster.Shutdown()
	}()
	r.cancel, r.done = cancel, done
}

// restart stops the controller, waits until its workers and informers have ended, and starts a
// new one, which begins with a fresh list of every object.
func (r *runningController) restart(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	cancel, done, admin := r.cancel, r.done, r.admin
	r.mu.Unlock()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller did not stop")
	}
	r.start(t, admin)
}

// watchGate holds back what the controller's VolumeSnapshot watches read while it is held: the
// events wait in the connection and arrive, in order, once it is released. Lists pass.
type watchGate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate lets events through
}

func newWatchGate() *watchGate {
	g := &watchGate{open: make(chan struct{})}
	close(g.open)
	return g
}

// hold stops events until release; t's cleanup releases them in any case.
func (g *watchGate) hold(t *testing.T) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
	t.Cleanup(g.release)
}

func (g *watchGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *watchGate) opened() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

func (g *watchGate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || req.URL.Query().Get("watch") == "" || resourceOf(req.URL.Path) != "volumesnapshots" {
			return resp, err
		}
		resp.Body = &gatedBody{ReadCloser: resp.Body, gate: g, closed: make(chan struct{})}
		return resp, nil
	})
}

// gatedBody hands on what it read only while the gate is open.
type gatedBody struct {
	io.ReadCloser
	gate      *watchGate
	closeOnce sync.Once
	closed    chan struct{}
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	select {
	case <-b.gate.opened():
	case <-b.closed:
	}
	return n, err
}

func (b *gatedBody) Close() error {
	b.closeOnce.Do(func() { close(b.closed) })
	return b.ReadCloser.Close()
}

func kubernetesFor(cfg *rest.Config) kubernetes.Interface { return kubernetes.NewForConfigOrDie(cfg) }

func clientsetFor(cfg *rest.Config) clientset.Interface { return clientset.NewForConfigOrDie(cfg) }
