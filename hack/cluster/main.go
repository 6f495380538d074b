// Command cluster starts and stops a local control plane for development: `make cluster-up` and
// `make cluster-down` call it. The processes run detached; their state, logs and the admin
// kubeconfig live in the state folder (default: <user cache>/shutter/cluster).
//
//	go run ./hack/cluster up [-dir DIR] [-audit-policy FILE]
//	go run ./hack/cluster down [-dir DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/testenv"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: cluster up|down [-dir DIR]"))
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", defaultDir(), "state folder: certificates, etcd data, logs, kubeconfig")
	audit := fs.String("audit-policy", "", "kube-apiserver audit policy file (log: DIR/audit.log)")
	_ = fs.Parse(os.Args[2:])

	switch os.Args[1] {
	case "up":
		fail(up(*dir, *audit))
	case "down":
		err := cluster.StopDir(*dir)
		if errors.Is(err, cluster.ErrNotRunning) {
			fmt.Fprintf(os.Stderr, "cluster: nothing running in %s\n", *dir)
			err = nil
		}
		if err == nil {
			err = os.RemoveAll(*dir)
		}
		fail(err)
	default:
		fail(fmt.Errorf("unknown command %q: want up or down", os.Args[1]))
	}
}

func up(dir, audit string) error {
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver.pid")); err == nil {
		return fmt.Errorf("a control plane already runs in %s; run `make cluster-down` first", dir)
	}
	_ = os.RemoveAll(dir) // leftovers of a control plane that did not stop cleanly
	bin, err := testenv.Tools("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Start(ctx, cluster.Options{
		Dir: dir, BinDir: bin, Detach: true, AuditPolicy: audit, Progress: os.Stderr,
	})
	if err != nil {
		_ = cluster.StopDir(dir)
		return err
	}
	fmt.Printf("export KUBECONFIG=%s\nexport PATH=%s:$PATH\n", c.Kubeconfig, bin)
	return nil
}

func defaultDir() string {
	if d := os.Getenv("SHUTTER_CLUSTER_DIR"); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "shutter", "cluster")
}

func fail(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}
