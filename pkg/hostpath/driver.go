//go:build linux

// Package hostpath is Shutter's CSI driver that keeps volumes in a local
// directory: mount volumes are directories, or ext4 images of their size
// mounted at such a directory (volimage.go), block volumes sparse files.
//
// Invariants:
//   - Data for an object is built under a ".tmp-" name and renamed into
//     place when complete. Recover removes data under temporary names and
//     moves data without a record to quarantine (quarantine.go): start-up
//     never deletes data it cannot account for.
//   - A volume's record is written only after its data is in place and, with
//     fsync on, flushed (files, new directories and the entry in volumes/):
//     a volume record always names complete data. The exception is a volume
//     restored with background sync: its record is written with a
//     pending-restore marker before the copy, the marker stays until its
//     data is flushed, and Recover flushes or re-copies it (restore.go).
//   - A snapshot's files are flushed before its data is renamed into place;
//     then its directories are flushed while its record, which carries a
//     manifest of the data, is handed to the device and, after that,
//     snapshots/ is flushed, which flushes the device's write cache and so
//     makes the record durable too. The snapshot is reported only after
//     that. A power failure can therefore
//     leave a record whose directories did not reach the disk; at start the
//     driver flushes the filesystem and drops every snapshot whose data does
//     not match its manifest (Recover). Such a snapshot was never
//     acknowledged.
//   - A snapshot of a volume that holds no data (an empty root directory,
//     a file without data extents) is a record only, marked empty and made
//     durable by the log's own flush; nothing is written below snapshots/.
//     Everything that reads snapshot data treats an empty snapshot as an
//     empty directory or a sparse file of its size, and Recover
//     quarantines data found under an empty snapshot's name.
//   - Records live in one record log shared by all tables, group-committed
//     (state.Log); directory flushes are shared by concurrent operations
//     too (state.SyncDir), so a burst of creates costs far fewer flushes
//     than operations.
//   - Records are deleted before their data, for the same reason.
//   - Every ID from a request passes checkID before it is joined to a path.
//   - An operation holds the per-ID locks of every object it reads or
//     changes for as long as it does I/O on them; no lock is global.
package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/internal/syncset"
	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/mounter"
	"github.com/shutter-csi/shutter/pkg/hostpath/quiesce"
	"github.com/shutter-csi/shutter/pkg/hostpath/registration"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// TopologyKey is the topology segment key the driver reports with the node
// ID as its value.
const TopologyKey = "topology.hostpath.csi.shutter.dev/node"

// Driver serves the CSI Identity, Controller, Node and GroupController
// services (and SnapshotMetadata when enabled) for one node.
type Driver struct {
	opts Options
	// dataLock keeps other drivers out of opts.DataDir until Close.
	dataLock *dataDirLock
	log      *state.Log
	// logSharesDevice says the record log is on the same filesystem as the
	// data, so flushing data flushes the log's writes too.
	logSharesDevice bool
	volumes         *state.Table[state.Volume]
	snapshots       *state.Table[state.Snapshot]
	groups          *state.Table[state.GroupSnapshot]
	locks           *idLocks
	copier          fscopy.Copier
	restores        *restoreSyncer
	quiesce         groupQuiescer
	// quarantine takes data no record accounts for.
	quarantine *quarantine
	// calls counts CSI calls whose handlers still run; Close waits for them
	// (after a forced stop, gRPC no longer does).
	calls sync.WaitGroup
	// closeWaits, when set (by tests), is called as Close starts waiting
	// for calls.
	closeWaits func()
	// now is the clock; tests may replace it.
	now func() time.Time

	// capMu guards capacity accounting: reserved holds bytes promised to
	// operations whose records are not written yet.
	capMu    sync.Mutex
	reserved map[string]int64

	// mountedImages are the IDs of the image volumes the driver has
	// mounted at their paths (volimage.go).
	mountedImages syncset.Set[string]
	// mounter makes the node service's mounts and loop devices.
	mounter mounter.Interface
}

// Run starts the driver with opts and serves until ctx is cancelled.
func Run(ctx context.Context, opts Options) (err error) {
	d, err := New(ctx, opts)
	if err != nil {
		return err
	}
	// Close only after serving has ended: it releases the data directory.
	defer func() { err = errors.Join(err, d.Close()) }()
	path, err := socketPath(opts.Endpoint)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("create socket dir: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	defer os.Remove(path)
	if opts.HTTPEndpoint != "" {
		mlis, err := net.Listen("tcp", opts.HTTPEndpoint)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", opts.HTTPEndpoint, err)
		}
		go func() {
			if err := serveMetrics(ctx, mlis); err != nil {
				klog.FromContext(ctx).Error(err, "Serving metrics failed")
			}
		}()
	}
	if err := shareSocket(path, opts.SocketGroup); err != nil {
		_ = lis.Close()
		return err
	}
	if opts.KubeletRegistrationPath == "" {
		return d.Serve(ctx, lis)
	}
	return serveRegistered(ctx, d, lis)
}

// serveRegistered serves CSI and kubelet's plugin registration side by side. When kubelet rejects
// the registration, serving ends with that error, so that the driver's pod restarts.
func serveRegistered(ctx context.Context, d *Driver, lis net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	info := registration.Info{DriverName: d.opts.DriverName, Endpoint: d.opts.KubeletRegistrationPath}
	registered := make(chan error, 1)
	go func() {
		err := registration.Serve(ctx, d.opts.registrationSocket(), info)
		if err != nil {
			cancel()
		}
		registered <- err
	}()
	err := d.Serve(ctx, lis)
	cancel()
	return errors.Join(<-registered, err)
}

// shareSocket gives the socket at path to group gid with mode 0660, unless
// gid is negative.
func shareSocket(path string, gid int) error {
	if gid < 0 {
		return nil
	}
	if err := os.Chown(path, -1, gid); err != nil {
		return fmt.Errorf("give socket to group %d: %w", gid, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		return fmt.Errorf("make socket group-writable: %w", err)
	}
	return nil
}

// New resumes what an earlier driver left quiesced, locks and opens the
// data directory, recovers from any interrupted operation and returns a
// driver ready to serve. It fails while another driver, in this process or
// another, has the directory open. Close releases it.
func New(ctx context.Context, opts Options) (*Driver, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.DataDir = filepath.Clean(opts.DataDir)
	quiescer := quiesce.New(quiesce.Config{
		Enabled: opts.GroupSnapshotQuiesce && os.Geteuid() == 0, Timeout: opts.GroupSnapshotQuiesceTimeout,
		Journal: filepath.Join(opts.DataDir, "state", "quiesced.json"), CgroupRoot: opts.CgroupRoot,
	})
	d := &Driver{
		opts:     opts,
		locks:    newIDLocks(),
		copier:   fscopy.Copier{Sync: opts.Sync},
		now:      time.Now,
		reserved: map[string]int64{},
		quiesce:  quiescer,
		mounter:  opts.Mounter,
	}
	if d.mounter == nil {
		d.mounter = kernelMounter{}
	}
	// First of all, whatever fails later: pods a killed driver left
	// frozen must run again.
	if err := quiescer.Recover(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Resuming what a previous driver left quiesced failed")
	}
	if opts.GroupSnapshotQuiesce && os.Geteuid() != 0 {
		klog.FromContext(ctx).Info("Group snapshots are not quiesced: freezing the pods that use volumes needs root")
	}
	if opts.VolumeBacking == BackingImage {
		if err := checkLoopSupport(); err != nil {
			return nil, fmt.Errorf("--volume-backing=%s cannot work here: %w", BackingImage, err)
		}
	}
	for _, dir := range dataDirs(opts.DataDir) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
	}
	d.quarantine = &quarantine{
		root: filepath.Join(opts.DataDir, quarantineDirName), sync: opts.Sync, maxAge: opts.QuarantineMaxAge,
		now: func() time.Time { return d.now() }, logger: klog.FromContext(ctx),
	}
	var err error
	// Lock before reading anything: recovery removes data it finds no
	// record for, which would be another driver's work in progress.
	if d.dataLock, err = lockDataDir(opts.DataDir); err != nil {
		return nil, err
	}
	if err = d.open(ctx); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

// open opens the state and recovers from what a crash interrupted.
func (d *Driver) open(ctx context.Context) error {
	if err := d.openState(ctx); err != nil {
		return err
	}
	if err := d.recover(ctx); err != nil {
		return fmt.Errorf("recover state: %w", err)
	}
	if err := d.quarantine.refresh(); err != nil {
		return err
	}
	d.mountImages(klog.FromContext(ctx))
	d.thawImages(klog.FromContext(ctx))
	return nil
}

// Close waits for CSI handlers that still run (a forced stop cancels their
// contexts but does not wait for them) and for background restore flushes,
// which still write records, closes the record log and then releases the data directory, so that
// another driver may open it. Call it once, after Serve has returned; Run
// does. A killed driver needs no Close: the kernel releases the lock.
func (d *Driver) Close() error {
	var err error
	if d.closeWaits != nil {
		d.closeWaits()
	}
	d.calls.Wait()
	if d.restores != nil {
		d.restores.drain()
	}
	err = d.unmountImagesAtClose()
	if d.log != nil {
		err = errors.Join(err, d.log.Close())
	}
	return errors.Join(err, d.dataLock.release())
}

// openState opens the record log and its tables below DataDir/state.
func (d *Driver) openState(ctx context.Context) error {
	var err error
	stateDir := filepath.Join(d.opts.DataDir, "state")
	if d.log, err = state.OpenLog(stateDir, d.opts.Sync); err != nil {
		return err
	}
	if n := d.log.Dropped(); n > 0 {
		klog.FromContext(ctx).Info("Dropped the torn end of the record log", "bytes", n)
	}
	if d.logSharesDevice, err = sameFilesystem(stateDir, snapshotsDir(d.opts.DataDir)); err != nil {
		return err
	}
	if d.volumes, err = state.OpenTable[state.Volume](d.log, "volumes"); err != nil {
		return err
	}
	if d.snapshots, err = state.OpenTable[state.Snapshot](d.log, "snapshots"); err != nil {
		return err
	}
	if d.groups, err = state.OpenTable[state.GroupSnapshot](d.log, "groups"); err != nil {
		return err
	}
	d.restores = &restoreSyncer{bootID: readBootID(), logger: klog.FromContext(ctx), pending: map[string]*pendingFlush{}}
	d.restores.markers, err = state.OpenTable[state.PendingRestore](d.log, "restores")
	return err
}

// Serve registers the CSI services on a gRPC server, serves lis until ctx is
// cancelled and then stops gracefully.
func (d *Driver) Serve(ctx context.Context, lis net.Listener) error {
	logger := klog.FromContext(ctx)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(countUnary(&d.calls), logUnary(logger)),
		grpc.ChainStreamInterceptor(countStream(&d.calls), logStream(logger)),
	)
	csi.RegisterIdentityServer(srv, &identityServer{d: d})
	csi.RegisterControllerServer(srv, &controllerServer{d: d})
	csi.RegisterNodeServer(srv, &nodeServer{d: d})
	csi.RegisterGroupControllerServer(srv, &groupControllerServer{d: d})
	if d.opts.EnableSnapshotMetadata {
		csi.RegisterSnapshotMetadataServer(srv, &snapshotMetadataServer{d: d})
	}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(lis) }()
	if d.opts.QuarantineMaxAge > 0 {
		pruneCtx, stopPruning := context.WithCancel(ctx)
		defer stopPruning()
		go d.quarantine.pruneEvery(pruneCtx, quarantinePrunePeriod(d.opts.QuarantineMaxAge))
	}
	logger.Info("Serving CSI", "endpoint", lis.Addr().String(), "driver", d.opts.DriverName, "node", d.opts.NodeID)
	select {
	case err := <-errCh:
		d.quiesce.EndAll()
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		d.quiesce.EndAll()
		srv.Stop()
	}
	d.restores.drain()
	logger.Info("Stopped serving CSI")
	return nil
}

// quarantinePrunePeriod is how often quarantined data is checked against
// maxAge: a tenth of it, between a minute and an hour.
func quarantinePrunePeriod(maxAge time.Duration) time.Duration {
	return min(max(maxAge/10, time.Minute), time.Hour)
}

func volumesDir(dataDir string) string { return filepath.Join(dataDir, "volumes") }

// dataDirs are the folders of volume and snapshot data in the data folder.
func dataDirs(dataDir string) []string {
	return []string{volumesDir(dataDir), snapshotsDir(dataDir), imagesDir(dataDir), snapshotImagesDir(dataDir)}
}
func snapshotsDir(dataDir string) string { return filepath.Join(dataDir, "snapshots") }

// volumePath is where a volume's data lives. id must have passed checkID.
func (d *Driver) volumePath(id string) string { return filepath.Join(volumesDir(d.opts.DataDir), id) }

// snapshotPath is where a snapshot's data lives. id must have passed checkID.
func (d *Driver) snapshotPath(id string) string {
	return filepath.Join(snapshotsDir(d.opts.DataDir), id)
}

// tempPath is the name data is built under before it is renamed to final.
func tempPath(final string) string {
	return filepath.Join(filepath.Dir(final), tempPrefix+filepath.Base(final))
}

const tempPrefix = ".tmp-"

// recover finishes or undoes what a crash interrupted: it removes data under
// temporary names, quarantines data without a record (unless the records
// cannot be complete: then it leaves the data folders alone, see
// cleanupHalt), drops snapshot records whose data is gone or does not match
// their manifest, and drops member snapshots of group snapshots whose group
// record was never written. With
// fsync on it first flushes the filesystem, so that whatever a killed
// predecessor left unflushed is durable before the driver reports it.
func (d *Driver) recover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if d.opts.Sync {
		if err := syncFS(d.opts.DataDir); err != nil {
			return err
		}
	}
	halt, err := d.cleanupHalt(ctx)
	if err != nil {
		return err
	}
	if err := d.recoverRestores(ctx); err != nil {
		return err
	}
	groupless := map[string]bool{}
	for _, s := range d.snapshots.List() {
		if s.GroupSnapshotID == "" {
			continue
		}
		if _, ok := d.groups.Get(s.GroupSnapshotID); !ok {
			groupless[s.ID] = true
		}
	}
	for _, s := range d.snapshots.List() {
		problem := d.checkSnapshotData(s)
		if problem == "" {
			problem = d.checkSnapshotImage(s)
		}
		if groupless[s.ID] || problem != "" {
			logger.Info("Removing incomplete snapshot", "snapshotID", s.ID, "problem", problem, "groupless", groupless[s.ID])
			if err := d.snapshots.Delete(s.ID); err != nil {
				return err
			}
		}
	}
	for _, v := range d.volumes.List() {
		if _, err := os.Lstat(d.volumePath(v.ID)); err != nil {
			logger.Error(err, "Volume data is missing", "volumeID", v.ID)
		}
	}
	if halt != "" {
		logger.Info("Start-up cleanup halted: the data folders are left as they are; data without a record stays in place", "reason", halt)
		cleanupHalted.Set(1)
		return nil
	}
	cleanupHalted.Set(0)
	if err := d.unmountStrays(logger); err != nil {
		return err
	}
	if err := d.unmountSnapshotImageStrays(logger); err != nil {
		return err
	}
	if err := d.reconcileBlockLoops(); err != nil {
		return err
	}
	if err := d.quarantineOrphans(logger, snapshotsDir(d.opts.DataDir), kindSnapshot, d.hasSnapshotData); err != nil {
		return err
	}
	if err := d.quarantineOrphans(logger, imagesDir(d.opts.DataDir), kindVolume, d.hasImage); err != nil {
		return err
	}
	if err := d.quarantineOrphans(logger, snapshotImagesDir(d.opts.DataDir), kindSnapshotImage, d.hasSnapshotImage); err != nil {
		return err
	}
	return d.quarantineOrphans(logger, volumesDir(d.opts.DataDir), kindVolume, func(id string) bool {
		_, ok := d.volumes.Get(id)
		return ok
	})
}

// hasSnapshotData reports whether the snapshot id has a record that names
// data.
func (d *Driver) hasSnapshotData(id string) bool {
	s, ok := d.snapshots.Get(id)
	return ok && !s.Empty
}

// checkSnapshotData describes what is wrong with a snapshot's data, or
// returns "" when it exists and matches the record's manifest. An empty
// snapshot needs no data.
func (d *Driver) checkSnapshotData(s state.Snapshot) string {
	if s.Empty {
		return ""
	}
	path := d.snapshotPath(s.ID)
	if s.Manifest == nil {
		if _, err := os.Lstat(path); err != nil {
			return err.Error()
		}
		return ""
	}
	m, err := fscopy.ManifestOf(path)
	if err != nil {
		return err.Error()
	}
	if m != *s.Manifest {
		return fmt.Sprintf("data holds %d entries of %d bytes, the record %d of %d", m.Entries, m.Bytes, s.Manifest.Entries, s.Manifest.Bytes)
	}
	return ""
}

// sameFilesystem reports whether two paths are on the same filesystem.
func sameFilesystem(a, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return false, fmt.Errorf("stat %s: %w", a, err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		return false, fmt.Errorf("stat %s: %w", b, err)
	}
	return sa.Dev == sb.Dev, nil
}

// syncFS flushes the whole filesystem holding dir.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open data dir: %w", err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("flush data filesystem: %w", err)
	}
	return nil
}

// removeData removes a volume's or snapshot's data, file or tree.
func removeData(path string) error {
	if err := os.RemoveAll(path); err != nil {
		return status.Errorf(codes.Internal, "remove %s: %v", filepath.Base(path), err)
	}
	return nil
}

// reserve promises bytes of capacity to key until the returned release is
// called, failing with ResourceExhausted when the pool is exhausted. except
// names a volume whose recorded size the reservation replaces.
func (d *Driver) reserve(key string, bytes int64, except string) (func(), error) {
	d.capMu.Lock()
	defer d.capMu.Unlock()
	used := d.usedLocked(except)
	if used+bytes > d.opts.Capacity {
		return nil, status.Errorf(codes.ResourceExhausted, "%d bytes requested, %d of %d bytes free (quarantined data takes %d)",
			bytes, d.opts.Capacity-used, d.opts.Capacity, d.quarantine.bytes.Load())
	}
	d.reserved[key] = bytes
	return func() {
		d.capMu.Lock()
		delete(d.reserved, key)
		d.capMu.Unlock()
	}, nil
}

// freeCapacity is the number of bytes not provisioned yet.
func (d *Driver) freeCapacity() int64 {
	d.capMu.Lock()
	defer d.capMu.Unlock()
	return max(d.opts.Capacity-d.usedLocked(""), 0)
}

// usedLocked sums what counts against the capacity: every volume's stored
// size but except's, every snapshot that holds data (as much as its
// volume's size, the most it can hold, or its data's when more; an empty
// one is a record only), the quarantined data, and the reservations, which
// stand in for the records of what is being made. Called with capMu.
func (d *Driver) usedLocked(except string) int64 {
	used := d.quarantine.bytes.Load()
	for _, v := range d.volumes.List() {
		if _, ok := d.reserved[volumeKey(v.ID)]; !ok && v.ID != except {
			used += storedBytes(v)
		}
	}
	for _, s := range d.snapshots.List() {
		if _, ok := d.reserved[snapshotKey(s.ID)]; !ok {
			used += snapshotBytes(s)
		}
	}
	for _, r := range d.reserved {
		used += r
	}
	return used
}

// storedBytes is how much of the capacity volume v takes: its size, or its
// image's, which is larger for a volume under minImageSize.
func storedBytes(v state.Volume) int64 {
	if v.Image {
		return imageSize(v.CapacityBytes)
	}
	return v.CapacityBytes
}

// snapshotBytes is how much of the capacity snapshot s takes: its volume's
// size, or its data's when more (a small image volume's image holds more
// than the volume's size), and the size of its image copy; an empty
// snapshot's data is a record only.
func snapshotBytes(s state.Snapshot) int64 {
	data := s.SizeBytes
	switch {
	case s.Empty:
		data = 0
	case s.Manifest != nil:
		data = max(s.SizeBytes, s.Manifest.Bytes)
	}
	return data + s.ImageBytes
}

// topology is the node's topology segment, or nil without topology.
func (d *Driver) topology() map[string]string {
	if !d.opts.EnableTopology {
		return nil
	}
	return map[string]string{TopologyKey: d.opts.NodeID}
}

// installData renames data built at tmp to final and, with fsync on,
// flushes it: the new directories when c.Sync (a background restore flushes
// them later) and always the entry in the parent directory.
func (d *Driver) installData(c fscopy.Copier, tmp, final string, made fscopy.Copied) error {
	if err := d.moveIntoPlace(tmp, final); err != nil {
		return status.Errorf(codes.Internal, "install data: %v", err)
	}
	if !d.opts.Sync {
		return nil
	}
	if !c.Sync {
		made.Dirs = nil
	}
	if err := fscopy.FlushTree(final, made); err != nil {
		return status.Errorf(codes.Internal, "flush data: %v", err)
	}
	return nil
}

func renameat(from, to string) error {
	for {
		err := unix.Renameat(unix.AT_FDCWD, from, unix.AT_FDCWD, to)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
		}
		return nil
	}
}
