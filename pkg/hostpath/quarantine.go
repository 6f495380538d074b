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
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// Data the driver cannot account for.
//
// Invariants:
//   - The driver never deletes volume or snapshot data that no record
//     accounts for. Start-up moves it, by a rename on the same filesystem
//     (no copy, no free space needed), to
//     <datadir>/quarantine/<start time>/volumes|snapshots/<id>, logs a line
//     for every entry and counts it (metrics.HostpathQuarantined). Such
//     data is usually left by an operation a crash interrupted between
//     data and record (or record and data, for a delete), but it may be
//     acknowledged data whose record was lost.
//   - Data under a temporary name is a copy that never finished and was
//     never reported: it is deleted.
//   - When the records cannot be complete, start-up changes nothing in the
//     data folders at all (cleanup halted, logged, metrics.
//     HostpathCleanupHalted set): when the record log is new while the
//     data folders hold data (records.log deleted), and when the log was
//     damaged in its middle (records written after the damage were lost).
//     A log damaged in its middle is kept in the quarantine folder as
//     records.log.
//   - Data found at runtime where a new volume or snapshot goes, with no
//     record, is quarantined the same way.
//   - What the quarantine folder takes of the disk counts against
//     --capacity and is exported (metrics.HostpathQuarantineBytes): it is
//     measured at start and grows with every move.
//   - Quarantined data is deleted only when Options.QuarantineMaxAge is set
//     (off by default): a start's folder is, once nothing was moved into it
//     for that long.

// quarantineDirName is the quarantine folder's name in the data folder.
const quarantineDirName = "quarantine"

// Kinds of quarantined data: metric label values and folder names.
const (
	kindVolume   = "volume"
	kindSnapshot = "snapshot"
	// kindSnapshotImage is a snapshot's copy of its volume's image
	// (snapimage.go).
	kindSnapshotImage = "snapshot-image"
	kindRecordLog     = "record-log"
)

// quarantine moves data into this start's quarantine folder.
type quarantine struct {
	root   string
	sync   bool
	now    func() time.Time
	logger klog.Logger

	// maxAge, when positive, is how long a start's folder is kept after
	// the last move into it.
	maxAge time.Duration

	mu sync.Mutex
	// dir is this start's folder below root, made on first use.
	dir string
	// bytes is what the folder's data takes of the disk.
	bytes atomic.Int64
}

// folderOf is where data of kind goes inside a start's folder.
func folderOf(kind string) string {
	switch kind {
	case kindVolume:
		return "volumes"
	case kindSnapshot:
		return "snapshots"
	case kindSnapshotImage:
		return snapshotImagesDirName
	}
	return "state"
}

// move renames path into the quarantine folder, as name, and returns where
// it went. It fails, leaving path alone, when the quarantine folder is on
// another filesystem: data is never copied.
func (q *quarantine) move(kind, path, name string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.makeDir(); err != nil {
		return "", err
	}
	folder := filepath.Join(q.dir, folderOf(kind))
	if err := os.MkdirAll(folder, 0o750); err != nil {
		return "", fmt.Errorf("create quarantine folder: %w", err)
	}
	dst := filepath.Join(folder, name)
	for i := 1; exists(dst); i++ {
		dst = filepath.Join(folder, fmt.Sprintf("%s.%d", name, i))
	}
	if err := renameat(path, dst); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	if q.sync {
		if err := errors.Join(state.SyncDir(folder), state.SyncDir(filepath.Dir(path))); err != nil {
			return "", fmt.Errorf("flush quarantine: %w", err)
		}
	}
	quarantined.WithLabelValues(kind).Inc()
	size, err := fscopy.DiskUsage(dst)
	if err != nil {
		q.logger.Error(err, "Measuring quarantined data failed; it counts from the next start", "path", dst)
	}
	quarantineBytes.Set(float64(q.bytes.Add(size)))
	q.logger.Info("Moved data the driver has no record for to quarantine", "kind", kind, "from", path, "to", dst, "bytes", size)
	return dst, nil
}

// refresh deletes the start folders older than maxAge, if set, and
// measures what the quarantine folder takes.
func (q *quarantine) refresh() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.maxAge > 0 {
		if err := q.pruneLocked(); err != nil {
			return err
		}
	}
	size, err := fscopy.DiskUsage(q.root)
	if errors.Is(err, fs.ErrNotExist) {
		size, err = 0, nil
	}
	if err != nil {
		return fmt.Errorf("measure quarantine: %w", err)
	}
	q.bytes.Store(size)
	quarantineBytes.Set(float64(size))
	return nil
}

// pruneLocked deletes the start folders nothing was moved into for
// maxAge. The caller holds mu.
func (q *quarantine) pruneLocked() error {
	entries, err := os.ReadDir(q.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read quarantine: %w", err)
	}
	now := q.now()
	for _, e := range entries {
		dir := filepath.Join(q.root, e.Name())
		last, err := lastMove(dir)
		if err != nil {
			return err
		}
		if now.Sub(last) < q.maxAge {
			continue
		}
		size, _ := fscopy.DiskUsage(dir)
		q.logger.Info("Deleting quarantined data older than --quarantine-max-age", "path", dir, "bytes", size, "lastMoveIn", last.UTC())
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("delete quarantined data: %w", err)
		}
		if dir == q.dir {
			q.dir = ""
		}
	}
	return nil
}

// lastMove is when data was last moved into the start folder dir: the
// latest change of it and of its kind folders, to which moves only add.
func lastMove(dir string) (time.Time, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return time.Time{}, fmt.Errorf("inspect quarantine: %w", err)
	}
	last := fi.ModTime()
	for _, kind := range []string{kindVolume, kindSnapshot, kindSnapshotImage, kindRecordLog} {
		if sub, err := os.Lstat(filepath.Join(dir, folderOf(kind))); err == nil && sub.ModTime().After(last) {
			last = sub.ModTime()
		}
	}
	return last, nil
}

// pruneEvery deletes quarantined data older than maxAge every period
// until ctx is done.
func (q *quarantine) pruneEvery(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := q.refresh(); err != nil {
				q.logger.Error(err, "Deleting old quarantined data failed")
			}
		}
	}
}

// makeDir creates this start's folder, named after the time, once. The
// caller holds mu.
func (q *quarantine) makeDir() error {
	if q.dir != "" {
		return nil
	}
	if err := os.MkdirAll(q.root, 0o750); err != nil {
		return fmt.Errorf("create quarantine folder: %w", err)
	}
	base := filepath.Join(q.root, q.now().UTC().Format("20060102T150405Z"))
	dir := base
	for i := 1; ; i++ {
		err := os.Mkdir(dir, 0o750)
		if err == nil {
			q.dir = dir
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create quarantine folder: %w", err)
		}
		dir = fmt.Sprintf("%s-%d", base, i)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// cleanupHalt returns why start-up must leave the data folders alone, or
// "" when the records can be trusted to account for all data. It moves a
// log damaged in its middle to quarantine.
func (d *Driver) cleanupHalt(ctx context.Context) (string, error) {
	logger := klog.FromContext(ctx)
	r := d.log.Recovery()
	if r.CompactErr != nil {
		logger.Info("The record log could not be written afresh at start; it is used as it was", "err", r.CompactErr)
	}
	if r.FramesAfterDamage > 0 {
		kept, err := d.quarantine.move(kindRecordLog, r.DamagedCopy, "records.log")
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("the record log is damaged in its middle: %d changes recorded after the damage are lost; the log as found is kept at %s", r.FramesAfterDamage, kept), nil
	}
	if !r.Created {
		return "", nil
	}
	for _, dir := range dataDirs(d.opts.DataDir) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return "", fmt.Errorf("read data dir: %w", err)
		}
		if len(entries) > 0 {
			return "the record log is new while the data folders hold data (was records.log deleted?)", nil
		}
	}
	return "", nil
}

// quarantineOrphans moves entries of dir that keep does not claim, data
// without a record (or without one that names data), to quarantine and
// removes entries under temporary names.
func (d *Driver) quarantineOrphans(logger klog.Logger, dir, kind string, keep func(name string) bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read data dir: %w", err)
	}
	for _, e := range entries {
		name, path := e.Name(), filepath.Join(dir, e.Name())
		switch {
		case strings.HasPrefix(name, tempPrefix):
			logger.Info("Removing data of an interrupted copy", "path", path)
			if err := removeData(path); err != nil {
				return err
			}
		case !keep(name):
			if _, err := d.quarantine.move(kind, path, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// moveIntoPlace renames data built at tmp to final. Data already at final
// has no record (the caller holds the ID's lock and found none): it was
// left by a failed attempt, or is data whose record was lost, and goes to
// quarantine first. It calls rename(2) directly: os.Rename first looks at
// final, which costs a system call on every create.
func (d *Driver) moveIntoPlace(tmp, final string) error {
	err := renameat(tmp, final)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTDIR) {
		if err := d.quarantineInTheWay(final); err != nil {
			return err
		}
		err = renameat(tmp, final)
	}
	return err
}

// quarantineInTheWay moves data without a record that is where a new
// volume or snapshot goes to quarantine.
func (d *Driver) quarantineInTheWay(path string) error {
	kind := kindVolume
	switch filepath.Dir(path) {
	case snapshotsDir(d.opts.DataDir):
		kind = kindSnapshot
	case snapshotImagesDir(d.opts.DataDir):
		kind = kindSnapshotImage
	}
	_, err := d.quarantine.move(kind, path, filepath.Base(path))
	return err
}
