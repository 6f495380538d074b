//go:build linux

package fscopy

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Restores write their data with direct I/O.
//
// A buffered copy of a large file is bounded by filling new page-cache
// pages, not by moving bytes: on the virtual machines this driver is measured
// on, copy_file_range into the page cache of a new 1 GiB file spends most of
// its time faulting in guest memory that the host had reclaimed, and those
// pages are of no use to a restore anyway. So restores read the snapshot
// (usually from the page cache) into a few reused buffers and write them to
// the device with O_DIRECT, several large writes in flight through Linux AIO.
// Asynchronous writes matter: a synchronous direct write holds the inode
// lock of ext4 until the device has finished, which serialises the writers.
//
// The target's data ranges are allocated first (fallocate), so that ext4
// treats every write as an overwrite of allocated blocks and lets them run
// concurrently.
//
// A completed direct write is in the device, so it survives a killed process
// just like the page cache does; it is durable only after an fsync, which the
// caller (or the background restore flush) still issues. Where the
// filesystem or the kernel refuses direct I/O or AIO, the copy falls back to
// copy_file_range.

const (
	// directChunk is the size of one direct write.
	directChunk = 4 << 20
	// directDepth is the number of direct writes in flight.
	directDepth = 8
	// directAlign is the alignment direct writes keep; ranges that do not
	// fill whole aligned blocks are Copied through the page cache.
	directAlign = 4096
)

// errDirectUnsupported says that the target cannot be written with direct
// I/O; the caller copies through the page cache instead.
var errDirectUnsupported = errors.New("direct I/O not supported")

// openDirect opens the file out again for direct writes; tests replace it.
var openDirect = func(out *os.File) (*os.File, error) {
	fd, err := reopen(int(out.Fd()), unix.O_WRONLY|unix.O_DIRECT)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), out.Name()), nil
}

// copyExtentsDirect copies the data extents of in (size bytes) to out:
// whole aligned blocks with direct I/O, through a second descriptor of
// out's file, unaligned edges through out. It reports errDirectUnsupported
// when direct I/O is refused; the caller then copies again, through the
// page cache.
func copyExtentsDirect(out *os.File, in *os.File, size int64) error {
	var pieces [][2]int64
	err := ForEachExtent(in, 0, size, func(start, end int64) error {
		alignedStart := (start + directAlign - 1) / directAlign * directAlign
		alignedEnd := end / directAlign * directAlign
		if alignedStart >= alignedEnd {
			return copyRange(out, in, start, end-start)
		}
		if err := copyRange(out, in, start, alignedStart-start); err != nil {
			return err
		}
		if err := copyRange(out, in, alignedEnd, end-alignedEnd); err != nil {
			return err
		}
		for off := alignedStart; off < alignedEnd; off += directChunk {
			pieces = append(pieces, [2]int64{off, min(off+directChunk, alignedEnd)})
		}
		return nil
	})
	if err != nil || len(pieces) == 0 {
		return err
	}
	direct, err := openDirect(out)
	if err != nil {
		return fmt.Errorf("open copy target for direct I/O: %w", refusesDirect(err))
	}
	defer direct.Close()
	for _, p := range pieces {
		// Without allocation ahead the writes still work, one at a time.
		if err := unix.Fallocate(int(direct.Fd()), 0, p[0], p[1]-p[0]); err != nil {
			break
		}
	}
	aio, err := newAIOContext(directDepth)
	if err != nil {
		return fmt.Errorf("%w: %w", errDirectUnsupported, err)
	}
	defer aio.close()
	bufs := directBuffers.get()
	defer directBuffers.put(bufs)
	return writeDirect(aio, bufs, direct, in, pieces)
}

// refusesDirect marks the errors with which a filesystem refuses direct
// I/O as errDirectUnsupported.
func refusesDirect(err error) error {
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w: %w", errDirectUnsupported, err)
	}
	return err
}

// writeDirect copies every [start, end) piece from in to out: it reads a
// piece into a free buffer and submits its write, up to one write per
// buffer in flight. It returns only after every submitted write finished.
func writeDirect(aio *aioContext, bufs [][]byte, out, in *os.File, pieces [][2]int64) error {
	free := make([]int, 0, len(bufs))
	for i := range bufs {
		free = append(free, i)
	}
	sizes := make([]int, len(bufs))
	var errs []error
	reap := func() error {
		events, err := aio.wait()
		if err != nil {
			// Nothing more can be reaped: wait for the writes in flight
			// by destroying the context, so the buffers are free again.
			aio.close()
			return err
		}
		for _, ev := range events {
			if err := eventError(ev, sizes[ev.data]); err != nil {
				errs = append(errs, fmt.Errorf("direct write: %w", refusesDirect(err)))
			}
			free = append(free, int(ev.data))
		}
		return nil
	}
	for _, p := range pieces {
		if len(errs) > 0 {
			break
		}
		if len(free) == 0 {
			if err := reap(); err != nil {
				return err
			}
		}
		slot := free[len(free)-1]
		buf := bufs[slot][:p[1]-p[0]]
		if _, err := in.ReadAt(buf, p[0]); err != nil {
			errs = append(errs, fmt.Errorf("read copy source: %w", err))
			break
		}
		if err := aio.pwrite(int(out.Fd()), buf, p[0], uint64(slot)); err != nil {
			errs = append(errs, refusesDirect(err))
			break
		}
		free, sizes[slot] = free[:len(free)-1], len(buf)
	}
	for len(free) < len(bufs) {
		if err := reap(); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// bufferPool keeps the buffers of direct writes between copies. They are
// mapped outside the Go heap (the kernel reads them while the Go code runs
// on), with transparent huge pages where offered, and kept: faulting in fresh
// memory costs more than the copy itself on the machines measured here. At
// most one set per concurrent restore exists, directDepth*directChunk bytes.
type bufferPool struct {
	mu   sync.Mutex
	sets [][][]byte
}

var directBuffers bufferPool

// get returns a set of directDepth buffers of directChunk bytes.
func (p *bufferPool) get() [][]byte {
	p.mu.Lock()
	if n := len(p.sets); n > 0 {
		set := p.sets[n-1]
		p.sets = p.sets[:n-1]
		p.mu.Unlock()
		return set
	}
	p.mu.Unlock()
	set := make([][]byte, directDepth)
	for i := range set {
		b, err := unix.Mmap(-1, 0, directChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			// Heap memory works too; the kernel only needs it to stay put,
			// and the pool keeps a reference.
			b = make([]byte, directChunk)
		} else {
			_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
		}
		set[i] = b
	}
	return set
}

// put returns a set for reuse.
func (p *bufferPool) put(set [][]byte) {
	p.mu.Lock()
	p.sets = append(p.sets, set)
	p.mu.Unlock()
}
