package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// writeAt writes, for every "OFFSET:LENGTH" of ranges, LENGTH bytes of the ChaCha8 stream keyed
// by sha256("SEED/OFFSET") at OFFSET of the device at path, flushes them and prints
// "total <sha256>" of the whole device as read back.
func writeAt(path, seed string, ranges []string, out io.Writer) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, r := range ranges {
		off, n, err := parseRange(r)
		if err != nil {
			return err
		}
		data := make([]byte, n)
		_, _ = rand.NewChaCha8(sha256.Sum256([]byte(seed + "/" + strconv.FormatInt(off, 10)))).Read(data)
		if _, err := f.WriteAt(data, off); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "total %s\n", hex.EncodeToString(h.Sum(nil)))
	return err
}

// parseRange parses "OFFSET:LENGTH", both bytes.
func parseRange(s string) (int64, int64, error) {
	o, l, ok := strings.Cut(s, ":")
	off, err1 := strconv.ParseInt(o, 10, 64)
	n, err2 := strconv.ParseInt(l, 10, 64)
	if !ok || err1 != nil || err2 != nil || off < 0 || n <= 0 || n > 64<<20 {
		return 0, 0, fmt.Errorf("range %q: want OFFSET:LENGTH in bytes, LENGTH up to 64 MiB", s)
	}
	return off, n, nil
}
