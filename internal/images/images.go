// Package images builds Shutter's container images: one OCI image index per component
// (snapshot-controller, csi-snapshotter, hostpath-driver, snapshot-conversion-webhook,
// csi-snapshot-metadata), each
// image a static binary with no shell. `make images` runs it through hack/images.
//
// Names agree with the Helm chart: <registry>/<component>:<version>, where the registry is the
// chart's global.imageRegistry and the tag the chart's appVersion (both set by the Makefile from
// the one version source, `git describe`).
package images

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/shutter-csi/shutter/internal/imagebuild"
)

// DefaultRegistry is the chart's global.imageRegistry (deploy/helm/shutter/values.yaml).
const DefaultRegistry = "ghcr.io/shutter-csi"

// Source is the repository named by every image's org.opencontainers.image.source label.
const Source = "https://github.com/shutter-csi/shutter"

// License is the SPDX expression of the org.opencontainers.image.licenses label (LICENSE).
const License = "Apache-2.0"

// NonRootUID is the user (and group) of every image that does not need root.
const NonRootUID = 65532

// Component is one image: the binary cmd/<Name> at /usr/local/bin/<Name>, its entrypoint (at
// /<Name>, with /usr/local/bin/<Name> a link to it, for a drop-in replacement of an upstream image).
type Component struct {
	// Name is the cmd/ folder, the binary and the image repository.
	Name string
	// Description becomes the org.opencontainers.image.description label.
	Description string
	// Root runs the image as root (uid 0) instead of NonRootUID.
	Root bool
	// CACertificates puts Options.CACertificates, when one is named, in the image: the binary is
	// a Kubernetes API client, which with --kubeconfig may talk TLS to a server whose certificate
	// chains to a CA its kubeconfig does not name. None is named by default.
	CACertificates bool
	// UpstreamPath puts the binary at /<Name>, where the upstream kubernetes-csi image of the
	// same name has it, so that charts setting command: [/<Name>] work with this image too.
	UpstreamPath bool
}

// Components are Shutter's images, in build order.
var Components = []Component{
	{Name: "snapshot-controller", CACertificates: true, UpstreamPath: true,
		Description: "Shutter's snapshot-controller: binds VolumeSnapshots to VolumeSnapshotContents"},
	{Name: "csi-snapshotter", CACertificates: true, UpstreamPath: true,
		Description: "Shutter's csi-snapshotter sidecar: turns snapshot contents into CSI calls"},
	{Name: "hostpath-driver", Root: true,
		Description: "Shutter's hostpath CSI driver: volumes and snapshots in a local directory"},
	{Name: "snapshot-conversion-webhook", CACertificates: true,
		Description: "Shutter's conversion webhook for the group snapshot API versions"},
	{Name: "csi-snapshot-metadata", CACertificates: true, UpstreamPath: true,
		Description: "Shutter's snapshot-metadata sidecar: serves changed block ranges of snapshots to backup applications"},
}

// DefaultPlatforms are the platforms every index holds.
var DefaultPlatforms = []string{"linux/amd64", "linux/arm64"}

// Options say what to build and how to name and label it.
type Options struct {
	// Dir is the module's root; "" is the current directory.
	Dir string
	// Version (the tag and org.opencontainers.image.version) and Commit
	// (org.opencontainers.image.revision).
	Version, Commit string
	// LDFlags stamp the binaries (the Makefile's LDFLAGS: pkg/version's Version and Commit).
	LDFlags string
	// Created is every image's creation time and every file's time (SOURCE_DATE_EPOCH).
	Created time.Time
	// Registry is the prefix of the image names; "" is DefaultRegistry.
	Registry string
	// Platforms to build; nil is DefaultPlatforms.
	Platforms []v1.Platform
	// CACertificates is a PEM bundle copied into the images that want one; "" (the default of
	// make images) puts none, so that no digest depends on the build machine.
	CACertificates string
	// BuildDir keeps the binaries between runs (go build skips a link that is up to date).
	BuildDir string
	// Only limits the build to these component names; nil builds every component.
	Only []string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Result is one built component.
type Result struct {
	Component Component
	// Ref is the image's full name, <registry>/<component>:<version>.
	Ref   string
	Index v1.ImageIndex
}

// Build compiles the selected components for every platform and builds their image indexes.
func Build(ctx context.Context, opts Options) ([]Result, error) {
	if err := opts.complete(); err != nil {
		return nil, err
	}
	selected, err := selectComponents(opts.Only)
	if err != nil {
		return nil, err
	}
	if err := buildBinaries(ctx, opts, selected); err != nil {
		return nil, err
	}
	var results []Result
	for _, c := range selected {
		ref := opts.Registry + "/" + c.Name + ":" + opts.Version
		if _, err := name.NewTag(ref, name.StrictValidation); err != nil {
			return nil, fmt.Errorf("image name %q: %w", ref, err)
		}
		idx, err := imagebuild.Build(opts.spec(c))
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", c.Name, err)
		}
		results = append(results, Result{Component: c, Ref: ref, Index: idx})
	}
	return results, nil
}

func (o *Options) complete() error {
	if o.Version == "" || o.Commit == "" {
		return fmt.Errorf("images: Version and Commit are required")
	}
	if o.Registry == "" {
		o.Registry = DefaultRegistry
	}
	if o.Platforms == nil {
		p, err := imagebuild.Platforms(DefaultPlatforms...)
		if err != nil {
			return err
		}
		o.Platforms = p
	}
	if o.BuildDir == "" {
		return fmt.Errorf("images: BuildDir is required")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

func selectComponents(only []string) ([]Component, error) {
	if len(only) == 0 {
		return Components, nil
	}
	var out []Component
	for _, n := range only {
		i := slices.IndexFunc(Components, func(c Component) bool { return c.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("images: unknown component %q", n)
		}
		out = append(out, Components[i])
	}
	return out, nil
}

// binaryPath is where component c's binary for platform p is built.
func (o *Options) binaryPath(c Component, p v1.Platform) string {
	return filepath.Join(o.BuildDir, p.OS+"-"+p.Architecture+p.Variant, c.Name)
}

// buildBinaries runs go build for every platform and component, reporting each step's time.
func buildBinaries(ctx context.Context, opts Options, selected []Component) error {
	total, n := len(selected)*len(opts.Platforms), 0
	for _, p := range opts.Platforms {
		for _, c := range selected {
			n++
			out := opts.binaryPath(c, p)
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			start := time.Now()
			fmt.Fprintf(opts.Log, "images: [%d/%d] go build %s for %s\n", n, total, c.Name, p)
			b := imagebuild.GoBuild{Dir: opts.Dir, Package: "./cmd/" + c.Name, LDFlags: opts.LDFlags}
			if err := b.Build(ctx, p, out); err != nil {
				return err
			}
			fmt.Fprintf(opts.Log, "images: [%d/%d] %s for %s built in %s\n", n, total, c.Name, p, time.Since(start).Round(100*time.Millisecond))
		}
	}
	return nil
}

// Labels are the OCI labels (and annotations) of component c's images.
func (o *Options) Labels(c Component) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       c.Name,
		"org.opencontainers.image.description": c.Description,
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Commit,
		"org.opencontainers.image.licenses":    License,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
}

// Binary is the path of c's binary in its image, its entrypoint.
func (c Component) Binary() string {
	if c.UpstreamPath {
		return "/" + c.Name
	}
	return "/usr/local/bin/" + c.Name
}

// spec is the imagebuild description of component c.
func (o *Options) spec(c Component) imagebuild.Image {
	user := fmt.Sprintf("%d:%d", NonRootUID, NonRootUID)
	if c.Root {
		user = "0:0"
	}
	bin := c.Binary()
	return imagebuild.Image{
		Platforms:   o.Platforms,
		Entrypoint:  []string{bin},
		User:        user,
		Labels:      o.Labels(c),
		Annotations: o.Labels(c),
		Created:     o.Created,
		Files: func(p v1.Platform) ([]imagebuild.File, error) {
			data, err := os.ReadFile(o.binaryPath(c, p))
			if err != nil {
				return nil, err
			}
			files := append(imagebuild.UserFiles("nonroot", NonRootUID),
				imagebuild.File{Path: bin, Mode: 0o755, Data: data},
				imagebuild.File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777})
			if c.UpstreamPath {
				files = append(files, imagebuild.File{Path: "/usr/local/bin/" + c.Name, Mode: 0o777, Link: bin})
			}
			if c.CACertificates && o.CACertificates != "" {
				ca, err := imagebuild.CACertificates(o.CACertificates)
				if err != nil {
					return nil, err
				}
				files = append(files, ca)
			}
			return files, nil
		},
	}
}
