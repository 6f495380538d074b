//go:build linux

package state

import (
	"path/filepath"
	"sync"
	"testing"
)

func TestSyncDirSharesFlushesAndForgetsIdleDirs(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Go(func() { errs[i] = SyncDir(dir) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := SyncDir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("flushing a missing directory succeeded")
	}
	flushMu.Lock()
	defer flushMu.Unlock()
	if len(flushes) != 0 {
		t.Fatalf("%d directories still tracked after every caller returned", len(flushes))
	}
}
