package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteThenReadGiveTheSameSums(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var written, read bytes.Buffer
	if err := run([]string{"write", dir, "3", "1000"}, &written); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"read", dir}, &read); err != nil {
		t.Fatal(err)
	}
	if written.String() != read.String() {
		t.Fatalf("write printed\n%s\nread printed\n%s", written.String(), read.String())
	}
	if lines := strings.Count(read.String(), "\n"); lines != 4 {
		t.Fatalf("want 3 files and a total, got %d lines:\n%s", lines, read.String())
	}
	// The content is deterministic: a second folder gives the same total.
	var again bytes.Buffer
	if err := run([]string{"write", filepath.Join(t.TempDir(), "d2"), "3", "1000"}, &again); err != nil {
		t.Fatal(err)
	}
	if again.String() != written.String() {
		t.Fatal("two writes of the same size gave different sums")
	}
	// A changed byte changes the total.
	if err := os.WriteFile(filepath.Join(dir, "file-001"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var changed bytes.Buffer
	if err := run([]string{"read", dir}, &changed); err != nil {
		t.Fatal(err)
	}
	if changed.String() == written.String() {
		t.Fatal("a changed file left the sums equal")
	}
}

// A block volume's pods write a device and read it back; here a file stands in for it.
func TestDeviceWriteThenReadGiveTheSameSum(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(dev, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	var written, read bytes.Buffer
	if err := run([]string{"writedev", dev, "4096"}, &written); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"readdev", dev, "4096"}, &read); err != nil {
		t.Fatal(err)
	}
	// The sha256 of bytes j*7 mod 251, j < 4096, computed apart (Python's hashlib).
	const want = "total 9141107b6ed1422839ed97f4674de82ae742ec2f8556c3df948da06930f94393\n"
	if written.String() != want || read.String() != want {
		t.Fatalf("writedev printed %q, readdev %q; want %q", written.String(), read.String(), want)
	}
	if err := os.WriteFile(dev, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var changed bytes.Buffer
	if err := run([]string{"readdev", dev, "4096"}, &changed); err == nil && changed.String() == read.String() {
		t.Fatal("a changed device left the sum equal")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"write"}, {"copy", "d"}, {"write", "d", "-1"}} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q: want an error", args)
		}
	}
}

// writeat writes the same bytes for the same seed and offset, other bytes in every 4 KiB block
// for another seed, nothing outside its ranges, and prints the sha256 of the whole device.
func TestWriteAt(t *testing.T) {
	dir := t.TempDir()
	device := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, 64<<10), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(dev, seed string, ranges ...string) []byte {
		var out bytes.Buffer
		if err := run(append([]string{"writeat", dev, seed}, ranges...), &out); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(dev)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("total %x\n", sha256.Sum256(data)); out.String() != want {
			t.Errorf("writeat printed %q, want %q", out.String(), want)
		}
		return data
	}
	a := write(device("a"), "1", "4096:8192", "40960:4096")
	if again := write(device("again"), "1", "4096:8192", "40960:4096"); !bytes.Equal(a, again) {
		t.Error("the same seed and ranges wrote different bytes")
	}
	b := write(device("b"), "2", "4096:8192", "40960:4096")
	for off := 0; off < len(a); off += 4096 {
		inside := off == 4096 || off == 8192 || off == 40960
		zero := bytes.Equal(a[off:off+4096], make([]byte, 4096))
		if inside == zero {
			t.Errorf("block at %d: written %v, all zeros %v", off, inside, zero)
		}
		if inside && bytes.Equal(a[off:off+4096], b[off:off+4096]) {
			t.Errorf("block at %d: seeds 1 and 2 wrote the same bytes", off)
		}
	}
	for _, bad := range []string{"4096", "x:1", "-1:4096", "0:0"} {
		if err := run([]string{"writeat", device("bad"), "1", bad}, &bytes.Buffer{}); err == nil {
			t.Errorf("range %q: want an error", bad)
		}
	}
}
