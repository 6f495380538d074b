package images

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/shutter-csi/shutter/internal/imagebuild"
)

// TarPath is the OCI image-layout tar of component name in dir.
func TarPath(dir, name string) string {
	return filepath.Join(dir, name+".tar")
}

// WriteTars writes each result as its own OCI image-layout tar, <dir>/<component>.tar, and logs
// its name, digest and size.
func WriteTars(dir string, results []Result, log io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, r := range results {
		path := TarPath(dir, r.Component.Name)
		if err := imagebuild.WriteLayoutFile(path, imagebuild.Tagged{Ref: r.Ref, Index: r.Index}); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		d, err := r.Index.Digest()
		if err != nil {
			return err
		}
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(log, "images: wrote %s: %s@%s (%.1f MB)\n", path, r.Ref, d, float64(info.Size())/1e6)
	}
	return nil
}

// Pushed is one index pushed to a registry.
type Pushed struct {
	Ref    string
	Digest v1.Hash
}

// Push pushes every result's index (with its images and layers) to <prefix>/<component>:<tag>,
// authenticating with the user's credentials (docker config and credential helpers).
func Push(ctx context.Context, prefix string, results []Result, log io.Writer) ([]Pushed, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	var pushed []Pushed
	for _, r := range results {
		src, err := name.NewTag(r.Ref, name.StrictValidation)
		if err != nil {
			return pushed, err
		}
		dst, err := name.NewTag(prefix+"/"+r.Component.Name+":"+src.TagStr(), name.StrictValidation)
		if err != nil {
			return pushed, fmt.Errorf("push target for %s: %w", r.Component.Name, err)
		}
		fmt.Fprintf(log, "images: pushing %s\n", dst)
		if err := remote.WriteIndex(dst, r.Index, remote.WithContext(ctx),
			remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return pushed, fmt.Errorf("push %s: %w", dst, err)
		}
		d, err := r.Index.Digest()
		if err != nil {
			return pushed, err
		}
		pushed = append(pushed, Pushed{Ref: dst.String(), Digest: d})
	}
	return pushed, nil
}
