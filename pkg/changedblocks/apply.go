package changedblocks

import (
	"fmt"
	"io"
)

// applyBuffer is the most Apply holds in memory.
const applyBuffer = 1 << 20

// Apply copies each range from src to dst: applied to a copy of a delta's base, the ranges of a
// delta read from a copy of its target make the base's copy equal to the target.
func Apply(src io.ReaderAt, dst io.WriterAt, ranges []Range) error {
	buf := make([]byte, applyBuffer)
	for _, r := range ranges {
		for off, end := r.Offset, r.Offset+r.Size; off < end; {
			n := int(min(int64(len(buf)), end-off))
			if _, err := src.ReadAt(buf[:n], off); err != nil {
				return fmt.Errorf("read %d bytes at %d: %w", n, off, err)
			}
			if _, err := dst.WriteAt(buf[:n], off); err != nil {
				return fmt.Errorf("write %d bytes at %d: %w", n, off, err)
			}
			off += int64(n)
		}
	}
	return nil
}
