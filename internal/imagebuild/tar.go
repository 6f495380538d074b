package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
)

// writeLayerTar writes files as a tar stream: sorted by path, missing parent directories added,
// numeric owners only, every time mtime.
func writeLayerTar(w io.Writer, files []File, mtime time.Time) error {
	entries, err := withParents(files)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, f := range entries {
		if err := tw.WriteHeader(header(f, mtime)); err != nil {
			return fmt.Errorf("tar header %s: %w", f.Path, err)
		}
		if !f.Mode.IsDir() && f.Link == "" {
			if _, err := tw.Write(f.Data); err != nil {
				return fmt.Errorf("tar data %s: %w", f.Path, err)
			}
		}
	}
	return tw.Close()
}

// withParents checks and cleans the paths of files, adds the parent directories not listed and
// returns everything sorted by path.
func withParents(files []File) ([]File, error) {
	byPath := make(map[string]File, len(files))
	for _, f := range files {
		clean := path.Clean(f.Path)
		if !path.IsAbs(f.Path) || clean == "/" {
			return nil, fmt.Errorf("imagebuild: file path %q must be absolute and not /", f.Path)
		}
		if _, dup := byPath[clean]; dup {
			return nil, fmt.Errorf("imagebuild: file path %q given twice", clean)
		}
		f.Path = clean
		byPath[clean] = f
	}
	for p := range byPath {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = File{Path: dir, Mode: fs.ModeDir | 0o755}
			}
		}
	}
	out := make([]File, 0, len(byPath))
	for _, f := range byPath {
		if parent, ok := byPath[path.Dir(f.Path)]; ok && !parent.Mode.IsDir() {
			return nil, fmt.Errorf("imagebuild: %q is under the regular file %q", f.Path, parent.Path)
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// header is the tar header of f: a name relative to the root, no user or group names, no access
// or change times.
func header(f File, mtime time.Time) *tar.Header {
	h := &tar.Header{
		Name:    strings.TrimPrefix(f.Path, "/"),
		Mode:    tarMode(f.Mode),
		Uid:     f.UID,
		Gid:     f.GID,
		ModTime: mtime.UTC().Truncate(time.Second),
	}
	if f.Mode.IsDir() {
		h.Typeflag = tar.TypeDir
		h.Name += "/"
		return h
	}
	if f.Link != "" {
		h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		return h
	}
	h.Typeflag = tar.TypeReg
	h.Size = int64(len(f.Data))
	return h
}

// tarMode converts fs.FileMode permission and special bits to the tar (Unix) mode bits.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// gzipBytes compresses b with a header that holds no name and no time.
func gzipBytes(b []byte) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
