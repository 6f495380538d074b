package stack

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// WriteData fills dir with a small tree of files whose content follows from seed: a MiB of
// random bytes, a sparse file, a text file and a nested folder. It returns the bytes written.
func WriteData(dir string, seed uint64) (int64, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	random := make([]byte, 1<<20)
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	sparse := make([]byte, 256<<10)
	copy(sparse[200<<10:], random[:1024])
	files := map[string][]byte{
		"random.bin":          random,
		"sparse.bin":          sparse,
		"hello.txt":           fmt.Appendf(nil, "written by Shutter, seed %d\n", seed),
		"nested/deeper/a.txt": random[4096:8192],
	}
	var total int64
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return total, err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return total, err
		}
		total += int64(len(data))
	}
	return total, nil
}

// CompareTrees checks that the regular files under want are in got with the same bytes, and that
// got has no other files. It returns the number of files and bytes compared.
func CompareTrees(want, got string) (files int, size int64, err error) {
	seen := map[string]bool{}
	err = filepath.WalkDir(want, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(want, path)
		seen[rel] = true
		a, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(got, rel))
		if err != nil {
			return fmt.Errorf("restored copy: %w", err)
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("%s differs: %d bytes written, %d restored", rel, len(a), len(b))
		}
		files++
		size += int64(len(a))
		return nil
	})
	if err != nil {
		return files, size, err
	}
	err = filepath.WalkDir(got, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if rel, _ := filepath.Rel(got, path); !seen[rel] {
			return fmt.Errorf("restored copy has an extra file %s", rel)
		}
		return nil
	})
	return files, size, err
}
