package imagebuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotation keys of the layout's index.json that name an image on import.
const (
	// AnnotationImageName is containerd's full image name ("registry/repo:tag"); `ctr images
	// import` and `kind load image-archive` name the imported image with it.
	AnnotationImageName = "io.containerd.image.name"
	// AnnotationRefName is the OCI layout's reference name: the tag alone, as the spec says.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Tagged is an index with the full reference ("registry/repository:tag") it is imported as.
type Tagged struct {
	Ref   string
	Index v1.ImageIndex
}

// layoutTime is the modification time of every entry of a layout tar.
var layoutTime = time.Unix(0, 0)

// WriteLayoutFile writes images as an OCI image-layout tar to path, replacing it only once the
// whole file is written.
func WriteLayoutFile(path string, images ...Tagged) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := WriteLayout(tmp, images...); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// WriteLayout writes images as one OCI image-layout tar (oci-layout, index.json and
// blobs/sha256/*, sorted, fixed times). Each image is an entry of index.json annotated with its
// full name (AnnotationImageName) and tag (AnnotationRefName).
func WriteLayout(w io.Writer, images ...Tagged) error {
	blobs := map[v1.Hash]blob{}
	top := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, im := range images {
		tag, err := name.NewTag(im.Ref, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("image reference %q: %w", im.Ref, err)
		}
		desc, err := collectIndex(im.Index, blobs)
		if err != nil {
			return fmt.Errorf("%s: %w", im.Ref, err)
		}
		desc.Annotations = map[string]string{AnnotationImageName: im.Ref, AnnotationRefName: tag.TagStr()}
		top.Manifests = append(top.Manifests, desc)
	}
	indexJSON, err := json.Marshal(top)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := writeDir(tw, "blobs/"); err != nil {
		return err
	}
	if err := writeDir(tw, "blobs/sha256/"); err != nil {
		return err
	}
	if err := writeBlobs(tw, blobs); err != nil {
		return err
	}
	if err := writeBytes(tw, "index.json", indexJSON); err != nil {
		return err
	}
	if err := writeBytes(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	return tw.Close()
}

// blob is one content-addressed file of the layout.
type blob struct {
	size int64
	open func() (io.ReadCloser, error)
}

// collectIndex adds idx's manifest and everything it refers to (nested indexes, image manifests,
// configs, layers) to blobs, and returns idx's descriptor.
func collectIndex(idx v1.ImageIndex, blobs map[v1.Hash]blob) (v1.Descriptor, error) {
	desc, err := addManifest(idx, blobs)
	if err != nil {
		return desc, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return desc, err
	}
	for _, child := range m.Manifests {
		switch {
		case child.MediaType.IsIndex():
			sub, err := idx.ImageIndex(child.Digest)
			if err != nil {
				return desc, err
			}
			if _, err := collectIndex(sub, blobs); err != nil {
				return desc, err
			}
		case child.MediaType.IsImage():
			img, err := idx.Image(child.Digest)
			if err != nil {
				return desc, err
			}
			if err := collectImage(img, blobs); err != nil {
				return desc, err
			}
		default:
			return desc, fmt.Errorf("index entry %s has the unsupported media type %s", child.Digest, child.MediaType)
		}
	}
	return desc, nil
}

// collectImage adds img's manifest, config and layers to blobs.
func collectImage(img v1.Image, blobs map[v1.Hash]blob) error {
	if _, err := addManifest(img, blobs); err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	blobs[cfgName] = bytesBlob(cfg)
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		blobs[d] = blob{size: size, open: l.Compressed}
	}
	return nil
}

// manifester is what images and indexes share: a raw manifest with its digest and media type.
type manifester interface {
	RawManifest() ([]byte, error)
	Digest() (v1.Hash, error)
	MediaType() (types.MediaType, error)
}

// addManifest adds m's manifest to blobs and returns its descriptor.
func addManifest(m manifester, blobs map[v1.Hash]blob) (v1.Descriptor, error) {
	raw, err := m.RawManifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := m.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := m.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	blobs[d] = bytesBlob(raw)
	return v1.Descriptor{MediaType: mt, Digest: d, Size: int64(len(raw))}, nil
}

func bytesBlob(b []byte) blob {
	return blob{size: int64(len(b)), open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}}
}

// writeBlobs writes blobs as blobs/sha256/<hex>, sorted by digest, checking each size.
func writeBlobs(tw *tar.Writer, blobs map[v1.Hash]blob) error {
	digests := make([]v1.Hash, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Slice(digests, func(i, j int) bool { return digests[i].String() < digests[j].String() })
	for _, d := range digests {
		if d.Algorithm != "sha256" {
			return fmt.Errorf("blob %s: only sha256 digests are supported", d)
		}
		b := blobs[d]
		if err := tw.WriteHeader(fileHeader("blobs/sha256/"+d.Hex, b.size)); err != nil {
			return err
		}
		rc, err := b.open()
		if err != nil {
			return err
		}
		n, err := io.Copy(tw, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("blob %s: %w", d, err)
		}
		if n != b.size {
			return fmt.Errorf("blob %s: %d bytes, want %d", d, n, b.size)
		}
	}
	return nil
}

func writeDir(tw *tar.Writer, name string) error {
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: layoutTime})
}

func writeBytes(tw *tar.Writer, name string, b []byte) error {
	if err := tw.WriteHeader(fileHeader(name, int64(len(b)))); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}

func fileHeader(name string, size int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: layoutTime}
}
