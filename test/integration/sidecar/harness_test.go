package sidecar

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/controller/controllertest"
	"github.com/shutter-csi/shutter/pkg/hostpath"
	"github.com/shutter-csi/shutter/pkg/sidecar"
	"github.com/shutter-csi/shutter/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// harness is one sidecar on the real control plane, talking through a proxy to a real
// hostpath driver over Unix sockets. Each harness has its own driver name, so tests sharing
// the control plane never see each other's contents.
type harness struct {
	driverName string
	dir        string
	kube       kubernetes.Interface
	client     clientset.Interface
	writes     *writeCounter
	proxy      *proxy
	processed  *controllertest.Signals // the sidecar's queues' processed signals

	stopDriver func()
	backend    *grpc.ClientConn // straight to the driver, as the test's own CSI client
}

// newHarness starts the driver, the proxy and the sidecar; all stop when the test ends.
func newHarness(t *testing.T, timeout time.Duration) *harness {
	t.Helper()
	env := testenv.Start(t)
	testenv.InstallCRDs(t, env.Config)
	dir, err := os.MkdirTemp("", "sidecar-it")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	h := &harness{driverName: fmt.Sprintf("it-%s.csi.shutter.dev", rand.String(6)), dir: dir, writes: newWriteCounter(),
		processed: controllertest.NewSignals()}
	h.kube = kubernetes.NewForConfigOrDie(env.Config)
	h.client = clientset.NewForConfigOrDie(env.Config)
	h.startDriver(t)
	h.proxy = startProxy(t, h.socket("proxy"), h.socket("driver"))

	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(h.writes.wrap)
	opts := sidecar.DefaultOptions()
	opts.CSIAddress, opts.Timeout, opts.Config = h.socket("proxy"), timeout, cfg
	opts.RetryIntervalStart, opts.RetryIntervalMax, opts.Workers, opts.ResyncPeriod = 100*time.Millisecond, time.Second, 2, time.Minute
	ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))))
	testenv.Go(t, controller.WithProcessed(ctx, h.processed.Hook), "sidecar", func(ctx context.Context) error { return sidecar.Run(ctx, opts) })
	return h
}

// contentQueue is the name of the sidecar's queue of VolumeSnapshotContents.
const contentQueue = "volumesnapshotcontents"

func (h *harness) socket(name string) string { return filepath.Join(h.dir, name+".sock") }

// startDriver runs the hostpath driver in-process on its socket and connects the test to it.
func (h *harness) startDriver(t *testing.T) {
	t.Helper()
	opts := hostpath.DefaultOptions()
	opts.Endpoint, opts.NodeID, opts.DriverName = "unix://"+h.socket("driver"), "node-1", h.driverName
	opts.DataDir, opts.Capacity, opts.Sync = filepath.Join(h.dir, "data"), 1<<30, false
	h.stopDriver = testenv.Go(t, context.Background(), "hostpath driver", func(ctx context.Context) error { return hostpath.Run(ctx, opts) })
	waitForSocket(t, h.socket("driver"))
	if h.backend == nil {
		conn, err := grpc.NewClient("unix://"+h.socket("driver"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		h.backend = conn
	}
}

// restartDriver stops the driver and starts it again on the same socket and data.
func (h *harness) restartDriver(t *testing.T) {
	t.Helper()
	h.stopDriver()
	h.startDriver(t)
}

func waitForSocket(t *testing.T, path string) {
	t.Helper()
	testenv.WaitUntil(t, "socket "+path+" accepts", 10*time.Second, func(context.Context) bool {
		c, err := net.Dial("unix", path)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	})
}

// createVolume makes a volume on the driver, as a provisioner would, and returns its id.
func (h *harness) createVolume(t *testing.T, name string) string {
	t.Helper()
	resp, err := csi.NewControllerClient(h.backend).CreateVolume(t.Context(), &csi.CreateVolumeRequest{
		Name:          name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVolume().GetVolumeId()
}

// backendSnapshots lists the driver's snapshots of volume (all with volume "").
func (h *harness) backendSnapshots(t *testing.T, volume string) []*csi.Snapshot {
	t.Helper()
	resp, err := csi.NewControllerClient(h.backend).ListSnapshots(t.Context(), &csi.ListSnapshotsRequest{SourceVolumeId: volume})
	if err != nil {
		t.Fatal(err)
	}
	var out []*csi.Snapshot
	for _, e := range resp.GetEntries() {
		out = append(out, e.GetSnapshot())
	}
	return out
}

// writeCounter counts the sidecar's writes (requests other than GET) per content name.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string][]string
}

func newWriteCounter() *writeCounter { return &writeCounter{counts: map[string][]string{}} }

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			if _, rest, ok := strings.Cut(req.URL.Path, "/volumesnapshotcontents/"); ok {
				name, sub, _ := strings.Cut(rest, "/")
				w.mu.Lock()
				w.counts[name] = append(w.counts[name], req.Method+" "+sub)
				w.mu.Unlock()
			}
		}
		return rt.RoundTrip(req)
	})
}

// take returns and resets the writes counted for name.
func (w *writeCounter) take(name string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.counts[name]
	delete(w.counts, name)
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
