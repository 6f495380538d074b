// Command workload is the test image of the local node's demo and e2e pods: it writes files with
// deterministic content into a folder, or reads a folder's files, and prints each file's sha256
// and one sha256 over all of them, so two pods' logs can be compared. It is static, because
// nothing can be pulled onto the node and the image holds this binary only.
//
// It also serves the chart's `helm test` where Services do not route (the local node has no
// kube-proxy): lease asks the API server, as the pod's service account, until every named Lease
// is held and renewed within its duration (at most a minute).
//
//	workload write DIR [FILES [BYTES]]   (default 16 files of 65536 bytes)
//	workload read DIR
//	workload writedev DEVICE [BYTES]      (default 1 MiB, at offset 0, flushed)
//	workload readdev DEVICE [BYTES]
//	workload writeat DEVICE SEED OFFSET:LENGTH...
//	workload lease NAMESPACE NAME...
//
// writedev and readdev print "total <sha256>" of the device's first BYTES bytes: a block
// volume's pods compare them. writeat writes LENGTH pseudo-random bytes at each OFFSET (drawn
// from SEED and the offset, so a rerun writes the same and another seed writes other bytes in
// every 4 KiB block), flushes them and prints "total <sha256>" of the whole device.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/shutter-csi/shutter/internal/kubehttp"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "workload: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) < 2 {
		return errors.New("usage: workload write DIR [FILES [BYTES]] | workload read DIR | workload writedev|readdev DEVICE [BYTES] | workload writeat DEVICE SEED OFFSET:LENGTH... | workload lease NAMESPACE NAME...")
	}
	switch args[0] {
	case "writeat":
		if len(args) < 4 {
			return errors.New("usage: workload writeat DEVICE SEED OFFSET:LENGTH...")
		}
		return writeAt(args[1], args[2], args[3:], out)
	case "writedev", "readdev":
		size, err := intArg(args, 2, 1<<20)
		if err != nil {
			return err
		}
		return device(args[0] == "writedev", args[1], size, out)
	case "lease":
		if len(args) < 3 {
			return errors.New("usage: workload lease NAMESPACE NAME...")
		}
		a, err := kubehttp.InCluster(10 * time.Second)
		if err != nil {
			return err
		}
		return checkLeases(context.Background(), a, args[1], args[2:], out, time.Minute, time.Second)
	case "write":
		files, err := intArg(args, 2, 16)
		if err != nil {
			return err
		}
		size, err := intArg(args, 3, 65536)
		if err != nil {
			return err
		}
		if err := write(args[1], files, size); err != nil {
			return err
		}
	case "read":
	default:
		return fmt.Errorf("unknown command %q: want write, read, writedev, readdev, writeat or lease", args[0])
	}
	return report(args[1], out)
}

func intArg(args []string, i, def int) (int, error) {
	if len(args) <= i {
		return def, nil
	}
	n, err := strconv.Atoi(args[i])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("argument %d: want a number >= 0, got %q", i, args[i])
	}
	return n, nil
}

// device writes size bytes of content (j*7) mod 251 at the start of the device at path and
// flushes them, when write is set, and then prints "total <sha256>" of its first size bytes as
// read back.
func device(write bool, path string, size int, out io.Writer) error {
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if write {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(j * 7 % 251)
		}
		if _, err := f.WriteAt(data, 0); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, int64(size))); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "total %s\n", hex.EncodeToString(h.Sum(nil)))
	return err
}

// write creates file-000 ... in dir; file i holds bytes (i*31 + j*7) mod 251 for j = 0..size-1,
// so every run gives the same data.
func write(dir string, files, size int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range files {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte((i*31 + j*7) % 251)
		}
		name := filepath.Join(dir, fmt.Sprintf("file-%03d", i))
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return err
		}
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// report prints "<sha256>  <name>" for every regular file in dir, sorted by name, then
// "total <sha256 of those lines>".
func report(dir string, out io.Writer) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].Name() < entries[b].Name() })
	total := sha256.New()
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		sum, err := fileSum(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s  %s\n", sum, e.Name())
		total.Write([]byte(line))
		if _, err := io.WriteString(out, line); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(out, "total %s\n", hex.EncodeToString(total.Sum(nil)))
	return err
}

func fileSum(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
