//go:build linux

package hostpath

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

const (
	// defaultMetadataResults is the batch size when a request sets none.
	defaultMetadataResults = 256
	// deltaBlock is the granularity at which two snapshots are compared.
	deltaBlock = 64 << 10
)

// snapshotMetadataServer implements the CSI SnapshotMetadata service for
// snapshots of block volumes and, with their image copies (snapimage.go),
// of image volumes: allocated ranges come from the data extents of the
// snapshot's block image (SEEK_DATA/SEEK_HOLE); deltas compare two images
// block by block where either of them has data. An empty block snapshot has
// no file and reads as holes only: nothing is allocated.
//
// A call holds the snapshots' locks, shared, only while it looks them up
// and opens their images; it streams from the open files. A client that
// stops reading therefore holds nothing that other calls need: the
// snapshots can be read by others and deleted meanwhile (what is open stays
// readable), and the stream ends with the call's context.
type snapshotMetadataServer struct {
	csi.UnimplementedSnapshotMetadataServer
	d *Driver
}

// GetMetadataAllocated streams the allocated ranges of a snapshot.
func (s *snapshotMetadataServer) GetMetadataAllocated(req *csi.GetMetadataAllocatedRequest, stream csi.SnapshotMetadata_GetMetadataAllocatedServer) error {
	if err := checkMaxResults(req.GetMaxResults()); err != nil {
		return err
	}
	imgs, err := s.d.openBlockImages(blockImageRef{"snapshot_id", req.GetSnapshotId()})
	if err != nil {
		return err
	}
	defer closeBlockImages(imgs)
	img := imgs[0]
	if err := checkOffset(req.GetStartingOffset(), img.size); err != nil {
		return err
	}
	if img.f == nil {
		return nil
	}
	out := s.sender(req.GetMaxResults(), func(typ csi.BlockMetadataType, blocks []*csi.BlockMetadata) error {
		return stream.Send(&csi.GetMetadataAllocatedResponse{BlockMetadataType: typ, VolumeCapacityBytes: img.size, BlockMetadata: blocks})
	})
	err = fscopy.ForEachExtent(img.f, req.GetStartingOffset(), img.size, func(start, end int64) error {
		return out.add(max(start, req.GetStartingOffset()), end)
	})
	if err == nil {
		err = out.flush()
	}
	return streamErr("read extents", err)
}

// GetMetadataDelta streams the ranges that differ between two snapshots of
// the same volume.
func (s *snapshotMetadataServer) GetMetadataDelta(req *csi.GetMetadataDeltaRequest, stream csi.SnapshotMetadata_GetMetadataDeltaServer) error {
	if err := checkMaxResults(req.GetMaxResults()); err != nil {
		return err
	}
	imgs, err := s.d.openBlockImages(blockImageRef{"base_snapshot_id", req.GetBaseSnapshotId()},
		blockImageRef{"target_snapshot_id", req.GetTargetSnapshotId()})
	if err != nil {
		return err
	}
	defer closeBlockImages(imgs)
	base, target := imgs[0], imgs[1]
	if base.snap.SourceVolumeID != target.snap.SourceVolumeID {
		return status.Error(codes.InvalidArgument, "base and target snapshots are of different volumes")
	}
	if err := checkOffset(req.GetStartingOffset(), target.size); err != nil {
		return err
	}
	out := s.sender(req.GetMaxResults(), func(typ csi.BlockMetadataType, blocks []*csi.BlockMetadata) error {
		return stream.Send(&csi.GetMetadataDeltaResponse{BlockMetadataType: typ, VolumeCapacityBytes: target.size, BlockMetadata: blocks})
	})
	err = diffFiles(base.f, target.f, req.GetStartingOffset(), target.size, out.add)
	if err == nil {
		err = out.flush()
	}
	return streamErr("compare snapshots", err)
}

// streamErr returns err as it is when it is a gRPC status (a failed send
// carries the stream's), else as Internal.
func streamErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// blockImageRef names a snapshot of a request: the field and the ID.
type blockImageRef struct{ field, id string }

// blockImage is what a snapshot's block metadata is read from: its block
// image, open (nil for an empty block snapshot, which has no file and is
// all holes), and the size of the block device that image stands for.
type blockImage struct {
	snap state.Snapshot
	f    *os.File
	size int64
}

// openBlockImages looks up the snapshots of refs and opens their block
// images: a block snapshot's file, an image volume snapshot's image copy.
// It holds the snapshots' locks, shared, only meanwhile. A snapshot of
// another kind is InvalidArgument.
func (d *Driver) openBlockImages(refs ...blockImageRef) ([]blockImage, error) {
	keys := make([]string, 0, len(refs))
	for _, r := range refs {
		if err := checkID(r.field, r.id); err != nil {
			return nil, err
		}
		keys = append(keys, snapshotKey(r.id))
	}
	release, err := d.locks.acquireShared(keys)
	if err != nil {
		return nil, err
	}
	defer release()
	imgs := make([]blockImage, 0, len(refs))
	for _, r := range refs {
		img, err := d.openBlockImage(r.field, r.id)
		if err != nil {
			closeBlockImages(imgs)
			return nil, err
		}
		imgs = append(imgs, img)
	}
	return imgs, nil
}

// openBlockImage opens the block image of one snapshot; the caller holds
// its lock.
func (d *Driver) openBlockImage(field, id string) (blockImage, error) {
	snap, err := d.lookupSnapshot(field, id)
	if err != nil {
		return blockImage{}, err
	}
	img := blockImage{snap: snap, size: snap.SizeBytes}
	var path string
	switch {
	case snap.AccessType == state.AccessBlock && snap.Empty:
		return img, nil
	case snap.AccessType == state.AccessBlock:
		path = d.snapshotPath(id)
	case snap.ImageBytes > 0:
		path, img.size = d.snapshotImagePath(id), snap.ImageBytes
	default:
		return img, status.Errorf(codes.InvalidArgument,
			"%s %s is not a snapshot of a block volume, nor of an image volume taken with the snapshot-metadata service on", field, id)
	}
	if img.f, err = os.Open(path); err != nil {
		return img, status.Errorf(codes.Internal, "open snapshot %s: %v", id, err)
	}
	return img, nil
}

func closeBlockImages(imgs []blockImage) {
	for _, img := range imgs {
		if img.f != nil {
			_ = img.f.Close()
		}
	}
}

func checkOffset(offset, size int64) error {
	if offset < 0 || offset > size {
		return status.Errorf(codes.OutOfRange, "starting_offset %d is outside the volume's %d bytes", offset, size)
	}
	return nil
}

func checkMaxResults(n int32) error {
	if n < 0 {
		return status.Errorf(codes.InvalidArgument, "max_results %d is negative (0 lets the driver choose)", n)
	}
	return nil
}

// diffFiles calls changed for every range in [from, size) where the two
// files differ. Ranges that are holes in both are skipped unread. A nil
// file is all holes.
func diffFiles(base, target *os.File, from, size int64, changed func(start, end int64) error) error {
	ranges, err := unionExtents(from, size, base, target)
	if err != nil {
		return err
	}
	a, b := make([]byte, deltaBlock), make([]byte, deltaBlock)
	done := int64(0) // blocks below done were compared already
	for _, r := range ranges {
		off := max(r[0]-r[0]%deltaBlock, done)
		for ; off < r[1]; off += deltaBlock {
			n := min(int64(deltaBlock), size-off)
			if err := readFull(base, a[:n], off); err != nil {
				return err
			}
			if err := readFull(target, b[:n], off); err != nil {
				return err
			}
			if err := changedBlocks(a[:n], b[:n], off, from, changed); err != nil {
				return err
			}
		}
		done = off
	}
	return nil
}

// changedBlocks calls changed for every MetadataBlockSize block at which a and b, read at off,
// differ (clipped to start at from). Equal chunks cost one comparison.
func changedBlocks(a, b []byte, off, from int64, changed func(start, end int64) error) error {
	if bytes.Equal(a, b) {
		return nil
	}
	for i := 0; i < len(a); i += MetadataBlockSize {
		j := min(i+MetadataBlockSize, len(a))
		if bytes.Equal(a[i:j], b[i:j]) {
			continue
		}
		if err := changed(max(off+int64(i), from), off+int64(j)); err != nil {
			return err
		}
	}
	return nil
}

// unionExtents merges the data extents of several files into sorted,
// non-overlapping ranges. Nil files have none.
func unionExtents(from, size int64, files ...*os.File) ([][2]int64, error) {
	var all [][2]int64
	for _, f := range files {
		if f == nil {
			continue
		}
		err := fscopy.ForEachExtent(f, from, size, func(start, end int64) error {
			all = append(all, [2]int64{max(start, from), end})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(all, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var merged [][2]int64
	for _, r := range all {
		if n := len(merged); n > 0 && r[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	return merged, nil
}

// readFull reads len(buf) bytes at off; bytes past the end of a shorter
// file, and all of a nil file, read as zeros.
func readFull(f *os.File, buf []byte, off int64) error {
	if f == nil {
		clear(buf)
		return nil
	}
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", f.Name(), err)
	}
	clear(buf[n:])
	return nil
}

// sender returns the metadataSender of this driver's block type.
func (s *snapshotMetadataServer) sender(maxResults int32, send func(csi.BlockMetadataType, []*csi.BlockMetadata) error) *metadataSender {
	m := int(maxResults)
	if m <= 0 {
		m = defaultMetadataResults
	}
	typ := csi.BlockMetadataType_VARIABLE_LENGTH
	if s.d.opts.SnapshotMetadataBlockType == BlockTypeFixed {
		typ = csi.BlockMetadataType_FIXED_LENGTH
	}
	return &metadataSender{max: m, typ: typ, send: func(b []*csi.BlockMetadata) error { return send(typ, b) }}
}

// metadataSender batches ranges into stream messages of at most max entries. VARIABLE_LENGTH
// merges ranges that touch; FIXED_LENGTH turns every range into the MetadataBlockSize blocks
// that cover it, each block once.
type metadataSender struct {
	max   int
	typ   csi.BlockMetadataType
	batch []*csi.BlockMetadata
	send  func([]*csi.BlockMetadata) error
	// next is, for FIXED_LENGTH, the end of the last block added.
	next int64
}

func (m *metadataSender) add(start, end int64) error {
	if end <= start {
		return nil
	}
	if m.typ == csi.BlockMetadataType_FIXED_LENGTH {
		for b := max(start-start%MetadataBlockSize, m.next); b < end; b += MetadataBlockSize {
			if err := m.append(b, MetadataBlockSize); err != nil {
				return err
			}
			m.next = b + MetadataBlockSize
		}
		return nil
	}
	if n := len(m.batch); n > 0 {
		last := m.batch[n-1]
		if last.ByteOffset+last.SizeBytes == start {
			last.SizeBytes += end - start
			return nil
		}
	}
	return m.append(start, end-start)
}

func (m *metadataSender) append(offset, size int64) error {
	if len(m.batch) == m.max {
		if err := m.flush(); err != nil {
			return err
		}
	}
	m.batch = append(m.batch, &csi.BlockMetadata{ByteOffset: offset, SizeBytes: size})
	return nil
}

func (m *metadataSender) flush() error {
	if len(m.batch) == 0 {
		return nil
	}
	err := m.send(m.batch)
	m.batch = nil
	return err
}
