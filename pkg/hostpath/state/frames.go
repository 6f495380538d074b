//go:build linux

package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The frame format: a frame is the body's length and CRC-32C (little
// endian, frameHeader bytes), then the body: operation, table and ID (each
// preceded by its length as uvarint) and, for a put, the value.

// frameSize is the size of the frame that puts value under k.
func frameSize(k recordKey, value []byte) int64 {
	return int64(frameHeader + 1 + uvarintLen(len(k.table)) + len(k.table) + uvarintLen(len(k.id)) + len(k.id) + len(value))
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// appendFrame appends the frame of c to buf; see appendFramed and
// encodeBody.
func appendFrame(buf []byte, c change) []byte { return appendFramed(buf, encodeBody(c)) }

// appendFramed appends body as a frame: its length and CRC-32C (little
// endian), then the body.
func appendFramed(buf, body []byte) []byte {
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(body)))
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(body, castagnoli))
	return append(buf, body...)
}

// encodeBody encodes c: operation, table and ID (each preceded by its
// length as uvarint) and, for a put, the value.
func encodeBody(c change) []byte {
	op := opPut
	if c.value == nil {
		op = opDelete
	}
	body := make([]byte, 0, frameSize(c.key, c.value)-frameHeader)
	body = append(body, op)
	body = binary.AppendUvarint(body, uint64(len(c.key.table)))
	body = append(body, c.key.table...)
	body = binary.AppendUvarint(body, uint64(len(c.key.id)))
	body = append(body, c.key.id...)
	return append(body, c.value...)
}

// errMalformed marks a frame whose checksum holds but whose body does not
// decode: not a torn write but a foreign or newer format.
var errMalformed = errors.New("malformed record")

// replay calls apply for every frame in data up to the first incomplete
// or corrupt one and returns the end of the last good frame.
func replay(data []byte, apply func(change)) (int64, error) {
	off := 0
	for len(data)-off >= frameHeader {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n == 0 || n > maxFrameBody || len(data)-off-frameHeader < n {
			break
		}
		body := data[off+frameHeader : off+frameHeader+n]
		if crc32.Checksum(body, castagnoli) != sum {
			break
		}
		c, err := decodeBody(body)
		if err != nil {
			return 0, fmt.Errorf("frame at offset %d: %w", off+len(logMagic), err)
		}
		apply(c)
		off += frameHeader + n
	}
	return int64(off), nil
}

// decodeBody decodes a frame body written by appendFrame.
func decodeBody(body []byte) (change, error) {
	op, rest := body[0], body[1:]
	table, rest, ok := cutString(rest)
	if !ok {
		return change{}, errMalformed
	}
	id, rest, ok := cutString(rest)
	if !ok {
		return change{}, errMalformed
	}
	c := change{key: recordKey{table: table, id: id}}
	switch {
	case op == opPut && len(rest) > 0:
		c.value = bytes.Clone(rest)
	case op == opDelete && len(rest) == 0:
	default:
		return change{}, errMalformed
	}
	return c, nil
}

// cutString splits a uvarint-prefixed string off b.
func cutString(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

// framesAfterDamage counts the valid frames that follow the damaged frame
// at the start of tail: it looks for a frame at every offset and, from the
// first one found, counts the frames that follow each other. A torn write
// at the end of the log leaves none, so a count above zero means the log
// was damaged in its middle (a bad sector, a flipped bit, an edit) and the
// records after the damage, which Open cannot keep, were written.
func framesAfterDamage(tail []byte) int {
	for off := 1; len(tail)-off > frameHeader; off++ {
		if frameAt(tail[off:]) == 0 {
			continue
		}
		n := 0
		for rest := tail[off:]; ; n++ {
			size := frameAt(rest)
			if size == 0 {
				return n
			}
			rest = rest[size:]
		}
	}
	return 0
}

// frameAt returns the size of the valid frame at the start of data, or 0
// when there is none: a length out of range, an operation that does not
// exist, a checksum that does not hold or a body that does not decode.
func frameAt(data []byte) int {
	if len(data) < frameHeader+1 {
		return 0
	}
	n := int(binary.LittleEndian.Uint32(data))
	if n == 0 || n > maxFrameBody || len(data)-frameHeader < n {
		return 0
	}
	body := data[frameHeader : frameHeader+n]
	if body[0] != opPut && body[0] != opDelete {
		return 0
	}
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[4:]) {
		return 0
	}
	if _, err := decodeBody(body); err != nil {
		return 0
	}
	return frameHeader + n
}
