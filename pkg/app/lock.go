package app

import (
	"context"
	"errors"
	"sync"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// errNotHolder is the error of a release refused by ownReleaseLock.
var errNotHolder = errors.New("not releasing the Lease: another replica holds it")

// ownReleaseLock hands the Lease back only while this replica holds it. When a term ends
// (lost, or on shutdown with ReleaseOnCancel) client-go (v0.37, tryRelease) reads the Lease,
// then decides whether this replica leads from the record it observed last, not from the one it
// has just read. A leader whose renewals stalled past the Lease (a frozen process, an API server
// restart) never observed its successor: it wrote an empty holder over the successor's Lease,
// a third process took the Lease at once, and two replicas led for up to RenewDeadline (found
// by the chaos suite). A release (empty holder) is written only when the record just read names
// this replica; the write still carries that read's resourceVersion, so a change in between is a
// conflict, after which client-go reads again.
type ownReleaseLock struct {
	resourcelock.Interface

	mu   sync.Mutex
	last *resourcelock.LeaderElectionRecord // from the latest Get, nil after a failed one
}

func (l *ownReleaseLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = nil
	if err == nil {
		l.last = rec
	}
	return rec, raw, err
}

func (l *ownReleaseLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity == "" {
		l.mu.Lock()
		last := l.last
		l.mu.Unlock()
		if last == nil || last.HolderIdentity != l.Identity() {
			return errNotHolder
		}
	}
	return l.Interface.Update(ctx, ler)
}
