//go:build linux

package state

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Directory flushes are group commits: an fsync of a directory makes every
// entry created, renamed or removed in it before the fsync started durable,
// so concurrent callers can share one. A caller whose change may have missed
// the flush in progress waits for it to end and then shares the next one.
// Under a burst of concurrent operations a directory is flushed about once
// per fsync latency instead of once per operation.

// dirFlush is the flush state of one directory. Generation numbers count
// flushes: started is the last one begun, done the last one finished.
type dirFlush struct {
	cond    *sync.Cond
	users   int
	running bool
	started uint64
	done    uint64
	// failed is the last generation that failed, with its error.
	failed  uint64
	failErr error
}

var (
	// flushMu guards flushes and every dirFlush in it.
	flushMu sync.Mutex
	// flushes holds the directories somebody is flushing or waiting for.
	flushes = map[string]*dirFlush{}
)

// SyncDir flushes a directory so that entries created, renamed or removed
// in it before the call survive a power failure. Concurrent calls for the
// same directory share fsyncs. An error from a flush this call depended on
// (or from a later one) is returned.
func SyncDir(dir string) error {
	flushMu.Lock()
	defer flushMu.Unlock()
	f := flushes[dir]
	if f == nil {
		f = &dirFlush{cond: sync.NewCond(&flushMu)}
		flushes[dir] = f
	}
	f.users++
	defer func() {
		if f.users--; f.users == 0 {
			delete(flushes, dir)
		}
	}()
	// The first flush to start after this point covers the caller's change.
	target := f.started + 1
	for f.done < target {
		if f.running {
			f.cond.Wait()
			continue
		}
		f.running = true
		f.started++
		gen := f.started
		flushMu.Unlock()
		err := Fsync(dir)
		flushMu.Lock()
		f.running = false
		f.done = gen
		if err != nil {
			f.failed, f.failErr = gen, err
		}
		f.cond.Broadcast()
	}
	if f.failed >= target {
		return f.failErr
	}
	return nil
}

// Fsync opens a file or directory and flushes it; unlike SyncDir, it shares
// the flush with no other caller.
func Fsync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open for sync: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Base(path), err)
	}
	return nil
}
