// Package imagebuild builds small, reproducible OCI images from files, without a container engine.
//
// An image is one layer of files (typically a static Go binary, plus optional CA certificates and
// /etc/passwd and /etc/group entries) under a config with an entrypoint, a user and labels. Build
// makes one image per platform and joins them in an OCI image index. Every byte is a function of
// the inputs: file times are the given creation time (SOURCE_DATE_EPOCH), tar entries are sorted,
// owners are numeric, and the layer is compressed with Go's deterministic gzip, so the same inputs
// give the same digests.
//
// WriteLayout writes indexes as an OCI image-layout tar that `ctr images import` and
// `kind load image-archive` accept; GoBuild cross-compiles the static binaries to put in.
package imagebuild

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of an image's layer.
type File struct {
	// Path is the absolute path inside the image, such as "/usr/local/bin/tool".
	Path string
	// Mode holds the permission bits; fs.ModeDir makes the entry a directory (Data is ignored).
	Mode fs.FileMode
	// UID and GID own the entry (numeric; no user names are recorded).
	UID, GID int
	// Data is the file's content.
	Data []byte
	// Link, when set, makes the entry a symbolic link to Link (Data is ignored).
	Link string
}

// Image describes one image, built once per platform.
type Image struct {
	// Platforms to build, in the order the index lists them.
	Platforms []v1.Platform
	// Files returns the layer's files for one platform (the binary differs per platform). Parent
	// directories that are not listed are added, owned by root with mode 0755.
	Files func(v1.Platform) ([]File, error)
	// Entrypoint and Cmd of the config.
	Entrypoint, Cmd []string
	// Env of the config, such as "PATH=/usr/local/bin".
	Env []string
	// User of the config, best numeric ("65532" or "65532:65532") so that runAsNonRoot can be
	// verified without an /etc/passwd lookup.
	User string
	// WorkingDir of the config.
	WorkingDir string
	// Labels of the config (org.opencontainers.image.* and the like).
	Labels map[string]string
	// Annotations of every image manifest and of the index.
	Annotations map[string]string
	// Created is the image's creation time and every file's modification time; use
	// SourceDateEpoch for reproducible builds.
	Created time.Time
}

// Build builds spec once per platform and returns the OCI image index of the results.
func Build(spec Image) (v1.ImageIndex, error) {
	if len(spec.Platforms) == 0 {
		return nil, fmt.Errorf("imagebuild: no platforms")
	}
	if spec.Files == nil {
		return nil, fmt.Errorf("imagebuild: no Files function")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range spec.Platforms {
		files, err := spec.Files(p)
		if err != nil {
			return nil, fmt.Errorf("files for %s: %w", p, err)
		}
		img, err := BuildImage(spec, p, files)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", p, err)
		}
		platform := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &platform},
		})
	}
	if len(spec.Annotations) > 0 {
		idx = mutate.Annotations(idx, spec.Annotations).(v1.ImageIndex)
	}
	return idx, nil
}

// BuildImage builds the image of spec for one platform with the given files (spec.Platforms and
// spec.Files are not used).
func BuildImage(spec Image, p v1.Platform, files []File) (v1.Image, error) {
	layer, err := Layer(files, spec.Created)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: spec.Created.UTC()}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		OSVersion:    p.OSVersion,
		Variant:      p.Variant,
		Created:      created,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: spec.Entrypoint,
			Cmd:        spec.Cmd,
			Env:        spec.Env,
			User:       spec.User,
			WorkingDir: spec.WorkingDir,
			Labels:     spec.Labels,
		},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "imagebuild", Comment: "files"},
	})
	if err != nil {
		return nil, err
	}
	if len(spec.Annotations) > 0 {
		img = mutate.Annotations(img, spec.Annotations).(v1.Image)
	}
	return img, nil
}

// Layer returns a gzip-compressed OCI layer holding files, each with modification time mtime.
// Equal inputs give a byte-identical layer.
func Layer(files []File, mtime time.Time) (v1.Layer, error) {
	var raw bytes.Buffer
	if err := writeLayerTar(&raw, files, mtime); err != nil {
		return nil, err
	}
	compressed, err := gzipBytes(raw.Bytes())
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
