//go:build linux

package fscopy

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux native AIO, just enough to keep several direct writes in flight
// from one goroutine. golang.org/x/sys/unix has the system call numbers but
// not the structures; these follow linux/aio_abi.h on little-endian
// machines.

// iocbCmdPwrite is IOCB_CMD_PWRITE.
const iocbCmdPwrite = 1

// iocb is struct iocb.
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   int32
	opcode    uint16
	reqPrio   int16
	fd        uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resFD     uint32
}

// ioEvent is struct io_event.
type ioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

// aioContext is an AIO context with room for depth requests in flight.
type aioContext struct {
	ctx    uintptr
	events []ioEvent
}

func newAIOContext(depth int) (*aioContext, error) {
	a := &aioContext{events: make([]ioEvent, depth)}
	if _, _, errno := unix.Syscall(unix.SYS_IO_SETUP, uintptr(depth), uintptr(unsafe.Pointer(&a.ctx)), 0); errno != 0 {
		return nil, fmt.Errorf("io_setup: %w", errno)
	}
	return a, nil
}

// close destroys the context, waiting for requests still in flight. A
// second close does nothing.
func (a *aioContext) close() {
	if a.ctx != 0 {
		_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, a.ctx, 0, 0)
		a.ctx = 0
	}
}

// pwrite submits a write of buf to fd at off, tagged with tag. buf must not
// be Go heap memory, and must stay untouched until the request is reaped.
func (a *aioContext) pwrite(fd int, buf []byte, off int64, tag uint64) error {
	cb := &iocb{
		data: tag, opcode: iocbCmdPwrite, fd: uint32(fd),
		buf: uint64(uintptr(unsafe.Pointer(&buf[0]))), nbytes: uint64(len(buf)), offset: off,
	}
	for {
		_, _, errno := unix.Syscall(unix.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&cb)))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return fmt.Errorf("io_submit: %w", errno)
		}
		return nil
	}
}

// wait reaps at least one finished request and returns the finished ones.
// A request's own error is in its event's res, as a negative errno.
func (a *aioContext) wait() ([]ioEvent, error) {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_GETEVENTS, a.ctx, 1, uintptr(len(a.events)),
			uintptr(unsafe.Pointer(&a.events[0])), 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return nil, fmt.Errorf("io_getevents: %w", errno)
		}
		return a.events[:n], nil
	}
}

// eventError turns a finished request's result into an error, checking
// that want bytes were written.
func eventError(ev ioEvent, want int) error {
	switch {
	case ev.res < 0:
		return unix.Errno(-ev.res)
	case ev.res != int64(want):
		return errors.New("short direct write")
	}
	return nil
}
