//go:build linux

package hostpath

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// A new image is checked before it is used: its filesystem's layout is
// read back from the file and held to what the kernel checks when it
// mounts (ext4_check_descriptors) and what e2fsck relies on. The formatter
// is a library that once placed metadata past the end of the filesystem
// for some sizes (see ext4Layout); a layout it gets wrong in a way not
// yet known fails CreateVolume with a clear error instead of giving a
// workload a filesystem that the kernel refuses or that loses data.

// Superblock fields (offsets in the superblock, which starts at byte 1024)
// and feature bits the check reads.
const (
	sbOffset          = 1024
	sbSize            = 1024
	sbBlocksCountLo   = 0x04
	sbFirstDataBlock  = 0x14
	sbLogBlockSize    = 0x18
	sbBlocksPerGroup  = 0x20
	sbInodesPerGroup  = 0x28
	sbMagic           = 0x38
	sbInodeSize       = 0x58
	sbFeatureIncompat = 0x60
	sbFeatureROCompat = 0x64
	sbReservedGDT     = 0xCE
	sbDescSize        = 0xFE
	sbBlocksCountHi   = 0x150

	ext4Magic            = 0xEF53
	incompatMetaBG       = 0x10
	incompat64Bit        = 0x80
	incompatFlexBG       = 0x200
	roCompatSparseSuper  = 0x1
	minGroupDescriptor   = 32
	maxCheckedBlockSize  = 64 << 10
	bitmapBlocksPerGroup = 1
)

// ext4Super is what the check needs of a superblock.
type ext4Super struct {
	blockSize, blocks, firstDataBlock    int64
	blocksPerGroup, inodesPerGroup       int64
	inodeSize, descSize, reservedGDT     int64
	flexBG, sparseSuper, is64Bit, metaBG bool
}

func (s ext4Super) groups() int64 { return ceilDiv(s.blocks-s.firstDataBlock, s.blocksPerGroup) }

// checkNewImage checks the image just formatted in f: the file still has
// its size, and the layout of its filesystem is sound.
func checkNewImage(f *os.File, size int64) error {
	if err := checkImageLayout(f, size); err != nil {
		return fmt.Errorf("the new image's filesystem is unsound: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != size {
		return fmt.Errorf("the new image is %d bytes, not %d: the formatter wrote past its end", fi.Size(), size)
	}
	return nil
}

// checkImageLayout reads the superblock and group descriptors of the ext4
// filesystem in the first size bytes of r and checks that every group's
// superblock copy, descriptor table, bitmaps and inode table lie inside the
// filesystem (inside their group without flex_bg) and that no two of them
// overlap.
func checkImageLayout(r io.ReaderAt, size int64) error {
	s, err := readExt4Super(r)
	if err != nil {
		return err
	}
	if s.blocks*s.blockSize > size {
		return fmt.Errorf("the filesystem has %d blocks of %d bytes, more than the image's %d bytes", s.blocks, s.blockSize, size)
	}
	descs := make([]byte, s.groups()*s.descSize)
	if _, err := r.ReadAt(descs, (s.firstDataBlock+1)*s.blockSize); err != nil {
		return fmt.Errorf("read group descriptors: %w", err)
	}
	var spans []blockSpan
	for g := range s.groups() {
		gs, err := s.groupSpans(g, descs[g*s.descSize:(g+1)*s.descSize])
		if err != nil {
			return err
		}
		spans = append(spans, gs...)
	}
	slices.SortFunc(spans, func(a, b blockSpan) int { return cmp.Compare(a.start, b.start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start < spans[i-1].end {
			return fmt.Errorf("%s overlaps %s", spans[i], spans[i-1])
		}
	}
	return nil
}

// readExt4Super reads and sanity-checks the primary superblock.
func readExt4Super(r io.ReaderAt) (ext4Super, error) {
	b := make([]byte, sbSize)
	if _, err := r.ReadAt(b, sbOffset); err != nil {
		return ext4Super{}, fmt.Errorf("read superblock: %w", err)
	}
	u16 := func(off int) int64 { return int64(binary.LittleEndian.Uint16(b[off:])) }
	u32 := func(off int) int64 { return int64(binary.LittleEndian.Uint32(b[off:])) }
	if u16(sbMagic) != ext4Magic {
		return ext4Super{}, errors.New("no ext4 superblock")
	}
	incompat, roCompat := u32(sbFeatureIncompat), u32(sbFeatureROCompat)
	s := ext4Super{
		blocks: u32(sbBlocksCountLo), firstDataBlock: u32(sbFirstDataBlock),
		blocksPerGroup: u32(sbBlocksPerGroup), inodesPerGroup: u32(sbInodesPerGroup),
		inodeSize: u16(sbInodeSize), descSize: minGroupDescriptor, reservedGDT: u16(sbReservedGDT),
		flexBG: incompat&incompatFlexBG != 0, sparseSuper: roCompat&roCompatSparseSuper != 0,
		is64Bit: incompat&incompat64Bit != 0, metaBG: incompat&incompatMetaBG != 0,
	}
	if log := u32(sbLogBlockSize); log <= 6 {
		s.blockSize = 1024 << log
	}
	if s.is64Bit {
		s.blocks |= u32(sbBlocksCountHi) << 32
		s.descSize = u16(sbDescSize)
	}
	switch {
	case s.blockSize < 1024 || s.blockSize > maxCheckedBlockSize:
		return s, fmt.Errorf("block size 2^(10+%d) is not supported", u32(sbLogBlockSize))
	case s.metaBG:
		return s, errors.New("meta_bg layouts are not checked")
	case s.blocksPerGroup <= 0 || s.blocksPerGroup > 8*s.blockSize || s.blocks <= s.firstDataBlock:
		return s, fmt.Errorf("%d blocks in groups of %d is not a filesystem", s.blocks, s.blocksPerGroup)
	case s.inodesPerGroup <= 0 || s.inodeSize < 128 || s.descSize < minGroupDescriptor:
		return s, fmt.Errorf("%d inodes of %d bytes per group, descriptors of %d bytes: not a filesystem", s.inodesPerGroup, s.inodeSize, s.descSize)
	}
	return s, nil
}

// blockSpan is a range of blocks holding one piece of a group's metadata.
type blockSpan struct {
	start, end int64
	what       string
	group      int64
}

func (b blockSpan) String() string {
	return fmt.Sprintf("the %s of group %d (blocks %d-%d)", b.what, b.group, b.start, b.end-1)
}

// groupSpans returns the metadata of group g, whose descriptor is d, and
// fails when a piece lies outside where the kernel accepts it.
func (s ext4Super) groupSpans(g int64, d []byte) ([]blockSpan, error) {
	loc := func(lo, hi int) int64 {
		v := int64(binary.LittleEndian.Uint32(d[lo:]))
		if s.descSize >= 64 {
			v |= int64(binary.LittleEndian.Uint32(d[hi:])) << 32
		}
		return v
	}
	first := s.firstDataBlock + g*s.blocksPerGroup
	last := min(first+s.blocksPerGroup, s.blocks) // end of the group
	itb := ceilDiv(s.inodesPerGroup*s.inodeSize, s.blockSize)
	spans := []blockSpan{
		{start: loc(0x0, 0x20), end: loc(0x0, 0x20) + bitmapBlocksPerGroup, what: "block bitmap", group: g},
		{start: loc(0x4, 0x24), end: loc(0x4, 0x24) + bitmapBlocksPerGroup, what: "inode bitmap", group: g},
		{start: loc(0x8, 0x28), end: loc(0x8, 0x28) + itb, what: "inode table", group: g},
	}
	lo, hi := first, last
	if s.flexBG {
		lo, hi = s.firstDataBlock, s.blocks
	}
	for _, sp := range spans {
		if sp.start < lo || sp.end > hi {
			return nil, fmt.Errorf("%s lies outside blocks %d-%d", sp, lo, hi-1)
		}
	}
	if s.hasSuperCopy(g) {
		gdt := ceilDiv(s.groups()*s.descSize, s.blockSize)
		sb := blockSpan{start: first, end: first + 1 + gdt + s.reservedGDT, what: "superblock and descriptor table", group: g}
		if sb.end > last {
			return nil, fmt.Errorf("%s does not fit into the group, which ends at block %d", sb, last-1)
		}
		spans = append(spans, sb)
	}
	return spans, nil
}

// hasSuperCopy reports whether group g holds the superblock or a copy:
// every group, or with sparse_super groups 0, 1 and the powers of 3, 5
// and 7.
func (s ext4Super) hasSuperCopy(g int64) bool {
	if !s.sparseSuper || g <= 1 {
		return true
	}
	for _, base := range []int64{3, 5, 7} {
		p := base
		for p < g {
			p *= base
		}
		if p == g {
			return true
		}
	}
	return false
}
