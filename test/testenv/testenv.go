// Package testenv hands tests a real control plane. The first test that asks starts etcd,
// kube-apiserver and kube-controller-manager for the whole test binary (building them into the
// per-user cache when missing); with SHUTTER_KUBECONFIG set, tests use that control plane instead,
// which is how `make test` shares one control plane between all test binaries.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shutter-csi/shutter/test/cluster"
)

// KubeconfigEnv names the variable that points tests at an already running control plane.
const KubeconfigEnv = "SHUTTER_KUBECONFIG"

// Env is a running control plane.
type Env struct {
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string
}

var shared struct {
	sync.Mutex
	env     *Env
	err     error
	cluster *cluster.Cluster
	tmp     string
}

// RepoRoot is the folder holding the repository's go.work.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Tools returns the folder holding the named binaries from hack/build-tools.sh, building any that
// are missing (a cold build of kube-apiserver takes about ten minutes; progress goes to stderr).
func Tools(names ...string) (string, error) {
	cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "build-tools.sh"), names...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/build-tools.sh %s: %w", strings.Join(names, " "), err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// BuiltTools returns the folder holding the named binaries when hack/build-tools.sh has built
// every one of them already; it builds nothing. ok is false when one is missing (or stale).
func BuiltTools(names ...string) (dir string, ok bool, err error) {
	cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "build-tools.sh"), append([]string{"--check"}, names...)...)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("hack/build-tools.sh --check %s: %w", strings.Join(names, " "), err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], true, nil
}

// Start returns the shared control plane, starting it on first use. Tests are skipped under -short.
func Start(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a control plane; skipped with -short")
	}
	env, err := start()
	if err != nil {
		t.Fatalf("local control plane: %v", err)
	}
	return env
}

// StartDedicated is Start for test binaries that run a cluster-wide controller: they always get a
// control plane of their own, so that their controller never acts on other packages' objects.
func StartDedicated(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a control plane; skipped with -short")
	}
	env, err := start(true)
	if err != nil {
		t.Fatalf("local control plane: %v", err)
	}
	return env
}

func start(dedicated ...bool) (*Env, error) {
	shared.Lock()
	defer shared.Unlock()
	if shared.env != nil || shared.err != nil {
		return shared.env, shared.err
	}
	shared.env, shared.err = startLocked(len(dedicated) > 0 && dedicated[0])
	return shared.env, shared.err
}

func startLocked(dedicated bool) (*Env, error) {
	if path := os.Getenv(KubeconfigEnv); path != "" && !dedicated {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, err
		}
		return &Env{Config: tuned(cfg), Kubeconfig: path}, nil
	}
	bin, err := Tools("etcd", "kube-apiserver", "kube-controller-manager")
	if err != nil {
		return nil, err
	}
	if shared.tmp, err = os.MkdirTemp("", "shutter-cluster-"); err != nil {
		return nil, err
	}
	c, err := cluster.Start(context.Background(), cluster.Options{Dir: shared.tmp, BinDir: bin, Progress: os.Stderr})
	if err != nil {
		return nil, err
	}
	shared.cluster = c
	return &Env{Config: tuned(c.Config), Kubeconfig: c.Kubeconfig}, nil
}

// tuned lifts client-side throttling, which would only slow tests down.
func tuned(cfg *rest.Config) *rest.Config {
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg
}

// Main runs a package's tests and then stops the control plane if this binary started one.
// Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop ends the control plane this binary started, if any, and removes its state folder.
func Stop() {
	shared.Lock()
	defer shared.Unlock()
	if shared.cluster != nil {
		shared.cluster.Stop()
		shared.cluster = nil
	}
	if shared.tmp != "" {
		_ = os.RemoveAll(shared.tmp)
		shared.tmp = ""
	}
	shared.env, shared.err = nil, nil
}
