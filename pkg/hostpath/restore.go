//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// Restores with background sync (Options.BackgroundRestoreSync).
//
// Flushing a restored volume's data takes as long as the device needs to
// make it durable, about a second per GiB here, while the copy itself is
// done as soon as the device has accepted the writes (restores write with
// direct I/O, see fscopy/directcopy.go; where that is refused, as soon as the copy
// is in the page cache). With background sync CreateVolume from a snapshot
// returns once the copy is complete and its records are durable, and a
// goroutine flushes the data afterwards.
//
// Invariants:
//   - A PendingRestore marker is durable before the copy starts, together
//     with the volume's record, and is removed only after the volume's data
//     and directory entry are flushed. A volume record with a marker may
//     name data that is incomplete or that a power failure could have
//     torn; one without a marker names complete, durable data.
//   - The marker is marked copied, without a flush, when the copy is
//     complete. A killed process loses nothing of a finished copy: the
//     device, or the page cache, holds it. The marker records the kernel's
//     boot ID, so at start Recover can tell a finished copy and a process
//     restart (same boot ID: flush again in the background) from a copy cut
//     short or a reboot (copy the source snapshot again, flushed, before
//     serving).
//   - Nothing can write the volume before its data is durable: NodeStage
//     and NodePublish wait for the flush. A recopy after a reboot therefore
//     never discards a workload's writes.
//   - The source snapshot outlives the marker: DeleteSnapshot and
//     DeleteVolumeGroupSnapshot wait for the flush of every volume restored
//     from the snapshots they delete.
//   - Only restores that copy data are made this way. A volume restored
//     from an empty snapshot (a record without data) is created and
//     flushed before its record is written, like a new volume.

// bootIDPath holds the ID the kernel draws at every boot.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// readBootID returns the kernel's boot ID, or "" when it is unavailable,
// which makes every pending restore look interrupted by a reboot.
func readBootID() string {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// restoreSyncer flushes restored volumes in the background and lets
// operations wait for that.
type restoreSyncer struct {
	markers *state.Table[state.PendingRestore]
	bootID  string
	logger  klog.Logger

	mu sync.Mutex
	// pending maps volume IDs to their flush in progress.
	pending map[string]*pendingFlush
	wg      sync.WaitGroup
}

// pendingFlush is one background flush; done is closed when it ends.
type pendingFlush struct {
	snapshotID string
	done       chan struct{}
	err        error
}

// restoreInBackground creates volume v from the snapshot data at source
// with background sync. The volume's record and its pending-restore marker
// are committed together, durably, before the copy starts: a flush after
// the copy would wait for the device to make all of the copied data
// durable, which is the background flush's job. The marker comes first in
// that commit, so no crash leaves the record without it. The copy is built
// in place, covered by the marker; once it is complete the marker is
// marked copied, without a flush, and the background flush removes it.
func (d *Driver) restoreInBackground(v state.Volume, source volumeData) error {
	r := d.restores
	m := state.PendingRestore{VolumeID: v.ID, SnapshotID: v.SourceSnapshotID, BootID: r.bootID}
	marker, err := r.markers.PutChange(v.ID, m)
	if err != nil {
		return storeErr("mark restore pending", err)
	}
	record, err := d.volumes.PutChange(v.ID, v)
	if err != nil {
		return storeErr("record volume", err)
	}
	if err := d.log.Commit(marker, record); err != nil {
		return storeErr("record volume", err)
	}
	path := d.volumePath(v.ID)
	c := fscopy.Copier{HolesKnown: true, Direct: true}
	_, err = d.writeVolumeData(c, path, v.AccessType, v.CapacityBytes, source)
	if errors.Is(err, fs.ErrExist) {
		// Data without a record, left by a crash or whose record was
		// lost: Recover would quarantine it too.
		if err = d.quarantineInTheWay(path); err == nil {
			_, err = d.writeVolumeData(c, path, v.AccessType, v.CapacityBytes, source)
		}
	}
	if err == nil {
		m.Copied = true
		if marker, err = r.markers.PutChange(v.ID, m); err == nil {
			err = d.log.CommitNoFlush(marker)
		}
	}
	if err != nil {
		// The record goes first: a crash in between leaves a marker
		// without a volume, which Recover drops.
		_ = d.log.Commit(d.volumes.DeleteChange(v.ID), r.markers.DeleteChange(v.ID))
		_ = removeData(path)
		return storeErr("restore volume data", err)
	}
	r.start(v.ID, v.SourceSnapshotID, path)
	return nil
}

// start flushes the data at path in the background and then removes the
// marker of volID.
func (r *restoreSyncer) start(volID, snapID, path string) {
	p := &pendingFlush{snapshotID: snapID, done: make(chan struct{})}
	r.mu.Lock()
	r.pending[volID] = p
	r.mu.Unlock()
	r.wg.Go(func() {
		err := fscopy.SyncTree(path)
		if err == nil {
			err = state.SyncDir(filepath.Dir(path))
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.pending[volID] == p {
			if err == nil {
				err = r.markers.Delete(volID)
			}
			if err == nil {
				delete(r.pending, volID)
			}
		}
		if err != nil {
			r.logger.Error(err, "Flushing restored volume failed; it is flushed again at the next start", "volumeID", volID)
			p.err = status.Errorf(codes.Internal, "flush restored volume: %v", err)
		}
		close(p.done)
	})
}

// forget drops volID's marker and flush, for a volume that is deleted or
// whose creation failed. A flush still running finds itself forgotten and
// leaves the marker of any later volume with the same ID alone.
func (r *restoreSyncer) forget(volID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, volID)
	if _, ok := r.markers.Get(volID); !ok {
		return nil
	}
	return r.markers.Delete(volID)
}

// wait blocks until the data of volID is durable.
func (r *restoreSyncer) wait(ctx context.Context, volID string) error {
	r.mu.Lock()
	p := r.pending[volID]
	r.mu.Unlock()
	return waitFlush(ctx, p)
}

// waitSnapshots blocks until every volume restored from one of snapIDs is
// durable, so that the snapshots may go.
func (r *restoreSyncer) waitSnapshots(ctx context.Context, snapIDs ...string) error {
	var flushes []*pendingFlush
	r.mu.Lock()
	for _, p := range r.pending {
		for _, id := range snapIDs {
			if p.snapshotID == id {
				flushes = append(flushes, p)
			}
		}
	}
	r.mu.Unlock()
	for _, p := range flushes {
		if err := waitFlush(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func waitFlush(ctx context.Context, p *pendingFlush) error {
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// drain waits for every flush in progress.
func (r *restoreSyncer) drain() { r.wg.Wait() }

// recoverRestores finishes restores whose data was not flushed when the
// driver stopped. It runs before snapshots are checked, while every source
// snapshot still exists.
func (d *Driver) recoverRestores(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	for _, m := range d.restores.markers.List() {
		v, ok := d.volumes.Get(m.VolumeID)
		if !ok {
			// The restore never finished; the data is an orphan.
			if err := d.restores.markers.Delete(m.VolumeID); err != nil {
				return err
			}
			continue
		}
		_, statErr := os.Lstat(d.volumePath(v.ID))
		sameBoot := m.BootID != "" && m.BootID == d.restores.bootID
		if m.Copied && sameBoot && statErr == nil {
			logger.Info("Flushing restored volume in the background", "volumeID", v.ID)
			d.restores.start(v.ID, m.SnapshotID, d.volumePath(v.ID))
			continue
		}
		logger.Info("Restoring volume again: its copy did not finish, or the machine restarted before its data was flushed",
			"volumeID", v.ID, "snapshotID", m.SnapshotID, "copied", m.Copied, "sameBoot", sameBoot)
		if err := d.restoreAgain(v, m.SnapshotID); err != nil {
			return fmt.Errorf("restore volume %s again: %w", v.ID, err)
		}
		if err := d.restores.markers.Delete(v.ID); err != nil {
			return err
		}
	}
	return nil
}

// restoreAgain replaces a volume's data with a flushed copy of its source
// snapshot.
func (d *Driver) restoreAgain(v state.Volume, snapID string) error {
	snap, ok := d.snapshots.Get(snapID)
	if !ok {
		return errors.New("source snapshot " + snapID + " is missing")
	}
	if err := removeData(d.volumePath(v.ID)); err != nil {
		return err
	}
	c := fscopy.Copier{Sync: true, HolesKnown: true, Direct: true}
	return d.buildVolume(c, v.ID, v.AccessType, v.CapacityBytes, d.snapshotData(snap))
}
