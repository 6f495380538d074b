package app

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"

	"github.com/shutter-csi/shutter/test/testenv"
)

func TestServeHTTP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	elector := NewElector(LeaderElectionOptions{RenewDeadline: time.Second}, "test")
	go func() {
		done <- ServeHTTP(ctx, HTTPOptions{Endpoint: addr, Profiling: true}, Registry(), elector.Check())
	}()

	get := func(path string) (int, string) {
		var resp *http.Response
		// Poll until the server listens, with a deadline.
		testenv.WaitUntil(t, "GET "+path, 10*time.Second, func(context.Context) bool {
			resp, err = http.Get("http://" + addr + path)
			return err == nil
		})
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics: %d %.80s", code, body)
	}
	for _, path := range []string{"/healthz", "/healthz/leader-election", "/debug/pprof/heap"} {
		if code, _ := get(path); code != 200 {
			t.Errorf("%s: %d", path, code)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestProtobufCopiesConfig(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 7}
	pb := Protobuf(cfg)
	if pb.ContentType != "application/vnd.kubernetes.protobuf" || pb.QPS != 7 || pb.Host != cfg.Host {
		t.Errorf("protobuf config %+v", pb)
	}
	if cfg.ContentType != "" || cfg.AcceptContentTypes != "" {
		t.Errorf("the original config changed: %+v", cfg)
	}
}

func TestHealthCheckFailure(t *testing.T) {
	mux := http.NewServeMux()
	InstallHealthChecks(mux, HealthCheck{Name: "broken", Check: func(*http.Request) error { return errors.New("no lease") }})
	for path, want := range map[string]int{"/healthz": 500, "/healthz/broken": 500, "/healthz/ping": 200} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("%s: %d %q, want %d", path, rec.Code, rec.Body.String(), want)
		}
		if want == 500 && !strings.Contains(rec.Body.String(), "[-]broken failed: no lease") {
			t.Errorf("%s: body %q", path, rec.Body.String())
		}
	}
}

func TestTuneRuntime(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	TuneRuntime(true)
	if runtime.MemProfileRate == 0 {
		t.Error("heap profile sampling off although profiling is served")
	}
	TuneRuntime(false)
	if runtime.MemProfileRate != 0 {
		t.Error("heap profile sampling on without profiling")
	}
	if got := debug.SetGCPercent(100); got != DefaultGCPercent {
		t.Errorf("GOGC unset: percent %d, want %d", got, DefaultGCPercent)
	}
	t.Setenv("GOGC", "100")
	TuneRuntime(false)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100 set: percent %d, want it left alone", got)
	}
}

// TestClientConfigCompression: responses are not gzipped unless --kube-api-compression asks.
func TestClientConfigCompression(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args    []string
		disable bool
	}{{nil, true}, {[]string{"--kube-api-compression"}, false}} {
		var o ClientOptions
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.AddFlags(fs, 5, 10)
		if err := fs.Parse(append([]string{"--kubeconfig=" + kubeconfig}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.Config("test")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.DisableCompression != tc.disable || cfg.QPS != 5 || cfg.UserAgent != "test" {
			t.Errorf("%v: DisableCompression %v QPS %v agent %q", tc.args, cfg.DisableCompression, cfg.QPS, cfg.UserAgent)
		}
	}
}

// TestPreferListResponses: streaming lists are off unless the user's environment chose.
func TestPreferListResponses(t *testing.T) {
	saved := clientfeatures.FeatureGates()
	t.Cleanup(func() { clientfeatures.ReplaceFeatureGates(saved) })
	PreferListResponses()
	if clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Error("WatchListClient still on")
	}
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.InformerResourceVersion) {
		t.Error("other gates changed")
	}

	clientfeatures.ReplaceFeatureGates(saved)
	t.Setenv(watchListEnv, "true")
	PreferListResponses()
	if clientfeatures.FeatureGates() != saved {
		t.Error("gates replaced although KUBE_FEATURE_WatchListClient is set")
	}
}

// TestLowerGCWhileSyncing: the target drops to SyncGCPercent and comes back once; a lower or
// disabled target is left alone.
func TestLowerGCWhileSyncing(t *testing.T) {
	saved := debug.SetGCPercent(50)
	t.Cleanup(func() { debug.SetGCPercent(saved) })
	restore := LowerGCWhileSyncing()
	if got := debug.SetGCPercent(SyncGCPercent); got != SyncGCPercent {
		t.Errorf("while syncing the target is %d, want %d", got, SyncGCPercent)
	}
	restore()
	restore()
	if got := debug.SetGCPercent(10); got != 50 {
		t.Errorf("after syncing the target is %d, want 50 back", got)
	}
	LowerGCWhileSyncing()()
	if got := debug.SetGCPercent(-1); got != 10 {
		t.Errorf("a lower target became %d", got)
	}
	LowerGCWhileSyncing()
	if got := debug.SetGCPercent(50); got != -1 {
		t.Errorf("a disabled collector got target %d", got)
	}
}

// Two electors on one host, both pid 1 in their containers, must not share an identity.
func TestLeaderIdentityIsUniquePerElector(t *testing.T) {
	a, err := leaderIdentity()
	if err != nil {
		t.Fatal(err)
	}
	b, err := leaderIdentity()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	suffix := "_" + strconv.Itoa(os.Getpid())
	for _, id := range []string{a, b} {
		if !strings.HasPrefix(id, host+"_") || !strings.HasSuffix(id, suffix) {
			t.Errorf("identity %q: want %s_<random>%s", id, host, suffix)
		}
	}
	if a == b {
		t.Errorf("two identities are equal: %q", a)
	}
}
