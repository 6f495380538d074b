//go:build linux

package hostpath

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// idLocks hands out per-ID locks without waiting: an operation on an ID that
// is already busy fails fast with codes.Aborted, which tells the CO to retry
// later. The one mutex guards only the map, never I/O.
//
// A lock is taken exclusively by an operation that changes its ID (deleting,
// expanding, publishing or staging a volume; creating or deleting a
// snapshot), or shared by one that only reads it: the snapshots of one source
// volume copy it side by side instead of answering Aborted to all but one.
type idLocks struct {
	mu sync.Mutex
	// held counts the holders of each busy key: n > 0 readers, or exclusive.
	held map[string]int
}

// exclusive is held's count for a key taken exclusively.
const exclusive = -1

func newIDLocks() *idLocks {
	return &idLocks{held: map[string]int{}}
}

// acquire takes every key exclusively, or none of them. On success it returns
// the function that releases them; otherwise a codes.Aborted error.
func (l *idLocks) acquire(keys ...string) (func(), error) {
	return l.acquireShared(nil, keys...)
}

// acquireShared takes the shared keys shared and the others exclusively, all
// or none: a shared key is refused only while it is held exclusively, an
// exclusive one while it is held at all.
func (l *idLocks) acquireShared(shared []string, keys ...string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range shared {
		if l.held[k] == exclusive {
			return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress", k)
		}
	}
	for _, k := range keys {
		if l.held[k] != 0 {
			return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress", k)
		}
	}
	for _, k := range shared {
		l.held[k]++
	}
	for _, k := range keys {
		l.held[k] = exclusive
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, k := range shared {
			if l.held[k]--; l.held[k] == 0 {
				delete(l.held, k)
			}
		}
		for _, k := range keys {
			delete(l.held, k)
		}
	}, nil
}

// Lock keys; the prefixes keep volume, snapshot and name locks apart.
func volumeKey(id string) string   { return "volume " + id }
func snapshotKey(id string) string { return "snapshot " + id }
func groupKey(id string) string    { return "group snapshot " + id }
