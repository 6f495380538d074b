package cluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestStartFailureStops: a start that fails (here etcd's binary is missing) returns the error
// and stops what it started instead of panicking on the cluster it no longer returns, which left
// a started node's processes and mounts behind.
func TestStartFailureStops(t *testing.T) {
	dir := t.TempDir()
	c, err := Start(context.Background(), Options{Dir: filepath.Join(dir, "cluster"), BinDir: t.TempDir()})
	if err == nil || c != nil {
		t.Fatalf("Start without binaries: %v, %v", c, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster", "etcd.pid")); !os.IsNotExist(err) {
		t.Errorf("etcd's pid file is there after the failed start: %v", err)
	}
}
