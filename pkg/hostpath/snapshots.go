//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// CreateSnapshot takes a point-in-time copy of a volume. It is idempotent by
// name; the same name with another source volume is AlreadyExists. The
// snapshot is complete, and so ready to use, when the call returns.
func (s *controllerServer) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if err := checkName(req.GetName()); err != nil {
		return nil, err
	}
	src := req.GetSourceVolumeId()
	if err := checkID("source_volume_id", src); err != nil {
		return nil, err
	}
	if err := s.d.checkAccessibility(req.GetAccessibilityRequirements()); err != nil {
		return nil, err
	}
	id := deriveID(snapshotPrefix, req.GetName())
	// The source is only read: snapshots of one volume are taken side by side.
	release, err := s.d.locks.acquireShared([]string{volumeKey(src)}, snapshotKey(id))
	if err != nil {
		return nil, err
	}
	defer release()
	if snap, ok := s.d.snapshots.Get(id); ok {
		if snap.SourceVolumeID != src || snap.GroupSnapshotID != "" {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists for another source volume", req.GetName())
		}
		return &csi.CreateSnapshotResponse{Snapshot: s.d.csiSnapshot(snap)}, nil
	}
	vol, err := s.d.lookupVolume("source_volume_id", src)
	if err != nil {
		return nil, err
	}
	snap := state.Snapshot{
		ID: id, Name: req.GetName(), SourceVolumeID: src, AccessType: vol.AccessType,
		SizeBytes: vol.CapacityBytes, Topology: vol.Topology, CreatedAt: s.d.now().UTC(),
	}
	if err := s.d.takeSnapshot(ctx, snap); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Created snapshot", "snapshotID", id, "volumeID", src)
	return &csi.CreateSnapshotResponse{Snapshot: s.d.csiSnapshot(snap)}, nil
}

// takeSnapshot records a snapshot of the source volume: a record only when
// the volume holds no data (recordEmptySnapshot), otherwise a copy of its
// data and a record (copySnapshot); an image volume's snapshot may keep a
// copy of its image too (takeImageSnapshot). The caller holds the
// snapshot's lock and a shared lock of the volume.
func (d *Driver) takeSnapshot(ctx context.Context, snap state.Snapshot) error {
	reserved := snap.SizeBytes
	if v, ok := d.volumes.Get(snap.SourceVolumeID); ok {
		reserved = storedBytes(v) // the most its data can take
		if err := d.volumeDataReady(v); err != nil {
			return err
		}
		if d.keepsSnapshotImage(v) {
			return d.takeImageSnapshot(ctx, snap, v)
		}
		if err := d.syncBlockDevices(v); err != nil {
			return err
		}
	}
	return d.recordSnapshotOf(ctx, snap, d.volumePath(snap.SourceVolumeID), reserved)
}

// recordSnapshotOf records snap with the volume data at src: a record only
// when it holds no data, otherwise a copy of it, for which reserved bytes
// of the capacity are reserved meanwhile (none: the caller reserved them).
func (d *Driver) recordSnapshotOf(ctx context.Context, snap state.Snapshot, src string, reserved int64) error {
	empty, info, err := holdsNoData(src, snap.SizeBytes)
	if err != nil {
		return status.Errorf(codes.Internal, "inspect source volume: %v", err)
	}
	if empty {
		st, err := statOf(info)
		if err != nil {
			return status.Errorf(codes.Internal, "inspect source volume: %v", err)
		}
		snap.Empty, snap.Mode, snap.UID, snap.GID = true, info.Mode()&modeBits, st.Uid, st.Gid
		return d.recordEmptySnapshot(snap)
	}
	if reserved > 0 {
		// A copy counts against the capacity like a volume of its size.
		release, err := d.reserve(snapshotKey(snap.ID), reserved, "")
		if err != nil {
			return err
		}
		defer release()
	}
	return d.copySnapshot(ctx, snap, src)
}

// modeBits are the bits chmod sets, which an empty snapshot keeps.
const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// statOf returns the system's view of info, which carries owner and times.
func statOf(info fs.FileInfo) (*syscall.Stat_t, error) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("no owner and times for %s", info.Name())
	}
	return st, nil
}

// holdsNoData reports whether the volume data at path holds nothing to
// copy: a directory without entries, or a file of size bytes without a data
// extent. It also returns what the directory or file is (mode and owner).
// Where the filesystem cannot tell holes from data, a file holds data.
func holdsNoData(path string, size int64) (bool, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return false, nil, err
	}
	switch {
	case info.IsDir():
		_, err := f.Readdirnames(1)
		if errors.Is(err, io.EOF) {
			return true, info, nil
		}
		return false, info, err
	case !info.Mode().IsRegular() || info.Size() != size:
		return false, info, nil
	}
	_, err = unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	return errors.Is(err, unix.ENXIO), info, nil
}

// recordEmptySnapshot records a snapshot of a volume that holds no data.
// The record is the whole snapshot, so the log's own flush (Commit) makes
// it durable and nothing is written below snapshots/. Data that an earlier,
// failed attempt left under the snapshot's name is never read; deleting the
// snapshot removes it, and Recover quarantines it.
func (d *Driver) recordEmptySnapshot(snap state.Snapshot) error {
	if err := d.snapshots.Put(snap.ID, snap); err != nil {
		return storeErr("record snapshot", err)
	}
	return nil
}

// copySnapshot copies the volume data at src to the snapshot's data path
// and records the snapshot.
//
// The copy is built under a temporary name, its files flushed, and renamed
// into place. Then its new directories are flushed while its record, with
// the data's manifest, is handed to the device (Log.CommitNoFlush) and,
// after that, snapshots/ is flushed: that flush of the device's write cache
// starts after the record reached the device and so makes it durable too,
// which saves the record a flush of its own. Should the machine fail before
// the flushes finished, Recover finds a record whose data is missing or does
// not match its manifest and drops it, and quarantines data without a
// record.
// The snapshot is reported only after the flushes.
func (d *Driver) copySnapshot(ctx context.Context, snap state.Snapshot, src string) error {
	final := d.snapshotPath(snap.ID)
	tmp := tempPath(final)
	made, err := d.copier.CopyPath(tmp, src)
	if errors.Is(err, fs.ErrExist) {
		// Left by an attempt whose cleanup failed; Recover removes it too.
		if err := os.RemoveAll(tmp); err != nil {
			return status.Errorf(codes.Internal, "clear stale snapshot data: %v", err)
		}
		made, err = d.copier.CopyPath(tmp, src)
	}
	if err == nil {
		err = d.moveIntoPlace(tmp, final)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return status.Errorf(codes.Internal, "copy volume data: %v", err)
	}
	if made.Changed > 0 {
		klog.FromContext(ctx).Info("Left out entries that vanished or were replaced while the volume was copied",
			"snapshotID", snap.ID, "volumeID", snap.SourceVolumeID, "entries", made.Changed)
	}
	snap.Manifest = &made.Manifest
	var dirsErr error
	var wg sync.WaitGroup
	if d.opts.Sync {
		wg.Go(func() { dirsErr = fscopy.FlushDirs(final, made.Dirs) })
	}
	rec, err := d.snapshots.PutChange(snap.ID, snap)
	if err == nil {
		err = d.commitBeforeDataFlush(rec)
	}
	if err != nil {
		wg.Wait()
		_ = removeData(final)
		return storeErr("record snapshot", err)
	}
	if d.opts.Sync {
		err = state.SyncDir(snapshotsDir(d.opts.DataDir))
	}
	wg.Wait()
	if err := errors.Join(err, dirsErr); err != nil {
		_ = d.deleteSnapshot(snap.ID)
		return status.Errorf(codes.Internal, "flush snapshot: %v", err)
	}
	return nil
}

// commitBeforeDataFlush commits a change that the caller makes durable by
// flushing a file or directory on the same filesystem after this returns:
// the change only needs to reach the device. When the record log lives on
// another filesystem it is committed durably instead.
func (d *Driver) commitBeforeDataFlush(c state.Change) error {
	if d.logSharesDevice {
		return d.log.CommitNoFlush(c)
	}
	return d.log.Commit(c)
}

// DeleteSnapshot removes a snapshot; an unknown ID is success. A member of
// a group snapshot is deleted with its group only (FailedPrecondition).
func (s *controllerServer) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	snap, found, release, err := lockIfAny(s.d, s.d.snapshots, "snapshot_id", id, snapshotKey(id))
	if err != nil {
		return nil, err
	}
	defer release()
	if !found {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	if err := s.d.restores.waitSnapshots(ctx, id); err != nil {
		return nil, err
	}
	if snap.GroupSnapshotID != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "snapshot %s belongs to group snapshot %s", id, snap.GroupSnapshotID)
	}
	if err := s.d.deleteSnapshot(id); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Deleted snapshot", "snapshotID", id)
	return &csi.DeleteSnapshotResponse{}, nil
}

// deleteSnapshot removes a snapshot's record, then its data and its image
// copy.
func (d *Driver) deleteSnapshot(id string) error {
	if err := d.snapshots.Delete(id); err != nil {
		return storeErr("delete snapshot record", err)
	}
	if err := removeData(d.snapshotPath(id)); err != nil {
		return err
	}
	return removeData(d.snapshotImagePath(id))
}

// ListSnapshots pages through snapshots in ID order, filtered by snapshot ID
// or source volume ID. Unknown or malformed filter IDs give an empty list.
func (s *controllerServer) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	var all []state.Snapshot
	switch {
	case req.GetSnapshotId() != "":
		if snap, ok := s.d.snapshots.Get(req.GetSnapshotId()); ok {
			all = append(all, snap)
		}
	case req.GetSourceVolumeId() != "":
		for _, snap := range s.d.snapshots.List() {
			if snap.SourceVolumeID == req.GetSourceVolumeId() {
				all = append(all, snap)
			}
		}
	default:
		all = s.d.snapshots.List()
	}
	snaps, next, err := page(all, func(s state.Snapshot) string { return s.ID }, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csi.ListSnapshotsResponse{NextToken: next}
	for _, snap := range snaps {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: s.d.csiSnapshot(snap)})
	}
	return resp, nil
}

// GetSnapshot returns one snapshot or NotFound.
func (s *controllerServer) GetSnapshot(_ context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	snap, err := s.d.lookupSnapshot("snapshot_id", req.GetSnapshotId())
	if err != nil {
		return nil, err
	}
	return &csi.GetSnapshotResponse{Snapshot: s.d.csiSnapshot(snap)}, nil
}

// lookupSnapshot validates id and returns its record or NotFound.
func (d *Driver) lookupSnapshot(field, id string) (state.Snapshot, error) {
	return lookup(d.snapshots, "snapshot", field, id)
}

// csiSnapshot converts a record to its CSI form. Every record is ready.
func (d *Driver) csiSnapshot(s state.Snapshot) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId: s.ID, SourceVolumeId: s.SourceVolumeID, SizeBytes: s.SizeBytes,
		CreationTime: timestamppb.New(s.CreatedAt), ReadyToUse: true, GroupSnapshotId: s.GroupSnapshotID,
	}
}
