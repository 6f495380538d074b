package conformance

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/shutter-csi/shutter/internal/imagebuild"
)

// The reference stack of the side-by-side run (`STACK=upstream make conformance`, by hand,
// outside CI; docs/conformance.md): upstream's csi-driver-host-path with upstream's
// node-driver-registrar, csi-snapshotter and snapshot-controller, and the node's csi-provisioner,
// which both stacks share. Its images are named under UpstreamRegistry.

// UpstreamRegistry is the prefix of the reference stack's images on the node.
const UpstreamRegistry = "localhost/upstream"

// UpstreamImage is one image of the reference stack: a static binary as its entrypoint, over
// busybox and Debian packages when the binary runs programs.
type UpstreamImage struct {
	// Name is the image's repository under UpstreamRegistry and the binary's file name.
	Name, Tag string
	// Packages are Debian packages put over busybox; none makes an image of the binary alone.
	Packages []string
}

// Ref is the image's full name.
func (i UpstreamImage) Ref() string { return UpstreamRegistry + "/" + i.Name + ":" + i.Tag }

// hostpathPackages are the programs csi-driver-host-path v1.18.0 runs besides busybox's: mount,
// umount and losetup (package mount: bind mounts, loop devices of block volumes), fallocate and
// findmnt (util-linux: block volume files, its volume health check), and the libraries they link
// (Debian 12). Its upstream image is Alpine with util-linux, coreutils and tar.
var hostpathPackages = []string{"mount", "util-linux", "libmount1", "libblkid1", "libsmartcols1", "libselinux1",
	"libpcre2-8-0", "libudev1", "libc6"}

// UpstreamImages are the reference stack's images, at the versions the side-by-side run used.
var UpstreamImages = []UpstreamImage{
	{Name: "hostpathplugin", Tag: "v1.18.0", Packages: hostpathPackages},
	{Name: "csi-node-driver-registrar", Tag: "v2.17.0"},
	{Name: "csi-snapshotter", Tag: "v8.6.0"},
	{Name: "snapshot-controller", Tag: "v8.6.0"},
}

// UpstreamPackages are the Debian packages UpstreamImages are made of, busybox-static first.
func UpstreamPackages() []string { return append([]string{"busybox-static"}, hostpathPackages...) }

// UpstreamOptions are the inputs of BuildUpstreamImages.
type UpstreamOptions struct {
	// Debs are UpstreamPackages' .deb files by package name.
	Debs map[string]string
	// BinDir holds a static binary per image, named like the image.
	BinDir string
	// Out is the folder the OCI image-layout tars are written to.
	Out     string
	Created time.Time
}

// BuildUpstreamImages builds UpstreamImages for this machine's architecture into o.Out and
// returns the tars' paths.
func BuildUpstreamImages(ctx context.Context, o UpstreamOptions) ([]string, error) {
	busybox, _, err := BusyboxFromDeb(ctx, o.Debs["busybox-static"])
	if err != nil {
		return nil, err
	}
	applets, err := busyboxApplets(ctx, busybox)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	base := BusyboxFiles(busybox, applets)
	return writeTars(o.Out, UpstreamImages, func(img UpstreamImage) (v1.ImageIndex, error) {
		binary, err := os.ReadFile(filepath.Join(o.BinDir, img.Name))
		if err != nil {
			return nil, err
		}
		return upstreamImage(ctx, img, base, o.Debs, binary, o.Created)
	})
}

// upstreamImage builds img from its binary, over busybox's files (base) and its packages' files
// when it has packages.
func upstreamImage(ctx context.Context, img UpstreamImage, base []imagebuild.File, debs map[string]string,
	binary []byte, created time.Time) (v1.ImageIndex, error) {
	var files []imagebuild.File
	if len(img.Packages) > 0 {
		var err error
		if files, err = withPackages(ctx, base, debs, img.Packages); err != nil {
			return nil, err
		}
	}
	files = append(append([]imagebuild.File(nil), files...), imagebuild.File{Path: "/" + img.Name, Mode: 0o755, Data: binary})
	return imagebuild.Build(imagebuild.Image{
		Platforms:  []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Entrypoint: []string{"/" + img.Name},
		Created:    created,
		Labels: map[string]string{"org.opencontainers.image.title": img.Name,
			"org.opencontainers.image.description": "upstream " + img.Name + " " + img.Tag + ", built from its source for the side-by-side conformance run"},
		Files: func(v1.Platform) ([]imagebuild.File, error) { return files, nil },
	})
}
