package hostpath

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// idLocks hands out per-ID locks without waiting: an operation on an ID that
// is already busy fails fast with codes.Aborted, which tells the CO to retry
// later. The one mutex guards only the map, never I/O.
type idLocks struct {
	mu   sync.Mutex
	busy map[string]struct{}
}

func newIDLocks() *idLocks {
	return &idLocks{busy: map[string]struct{}{}}
}

// acquire takes every key or none of them. On success it returns the
// function that releases them; otherwise a codes.Aborted error.
func (l *idLocks) acquire(keys ...string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if _, ok := l.busy[k]; ok {
			return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress", k)
		}
	}
	for _, k := range keys {
		l.busy[k] = struct{}{}
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, k := range keys {
			delete(l.busy, k)
		}
	}, nil
}

// Lock keys; the prefixes keep volume, snapshot and name locks apart.
func volumeKey(id string) string   { return "volume " + id }
func snapshotKey(id string) string { return "snapshot " + id }
func groupKey(id string) string    { return "group snapshot " + id }
