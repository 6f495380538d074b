// Package conformance builds what Kubernetes' "External Storage" end-to-end suites need on the
// offline local node: their pod images, made from Debian's busybox-static package (and the
// suite's own agnhost test server, built from the pinned k8s.io/kubernetes module), carrying the
// names the suite asks for under a local registry prefix (see RepoList). `make conformance`
// (hack/conformance.sh) imports them into the node; docs/conformance.md tells the rest.
package conformance

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/shutter-csi/shutter/internal/imagebuild"
)

// Registry is the prefix of every suite image: the suite's registries all map to it through the
// repository list (KUBE_TEST_REPO_LIST) RepoList writes, so no name points off the machine.
const Registry = "localhost/shutter/e2e"

// SuiteImage is one image the suite's pods use, as test/utils/image/manifest.go of the pinned
// k8s.io/kubernetes names it (repository under the registry, and tag).
type SuiteImage struct {
	Name, Tag string
	// Agnhost puts the agnhost binary in as the entrypoint (with "pause" as its default
	// argument, like the suite's image); the others are busybox alone.
	Agnhost bool
	// Packages are Debian packages whose files go over busybox's (their programs replace the
	// applets of the same path).
	Packages []string
	// Why says what the storage suites run in it, which is all this image can do.
	Why string
}

// Ref is the image's full name.
func (i SuiteImage) Ref() string { return Registry + "/" + i.Name + ":" + i.Tag }

// glibcPackages are GNU coreutils, dash as /bin/sh and the libraries they link (Debian 12):
// multiVolume's pods run GNU dd in glibc-dns-testing (oflag=nocache, which busybox's dd refuses),
// through sh -c; busybox's sh would run its own dd applet whatever the PATH says.
var glibcPackages = []string{"coreutils", "dash", "libc6", "libgcc-s1", "libacl1", "libattr1", "libgmp10", "libselinux1", "libpcre2-8-0"}

// SuiteImages are the images the External Storage suites start pods with (k8s.io/kubernetes
// v1.37.2, test/utils/image/manifest.go). The suites run only shell commands in busybox, nginx
// and glibc-dns-testing, so all three are busybox, glibc-dns-testing with GNU coreutils over it;
// agnhost also runs its own subcommands (pause, mounttest) and the host exec pods' nsenter.
var SuiteImages = []SuiteImage{
	{Name: "busybox", Tag: "1.37.0-2", Why: "the default test image: shell, dd, sha256sum, mount"},
	{Name: "agnhost", Tag: "2.66.1", Agnhost: true, Why: "pause, mounttest (subPath), nsenter of host exec pods"},
	{Name: "nginx", Tag: "1.27.0-2", Why: "volumes' exec test runs a shell script in it"},
	{Name: "glibc-dns-testing", Tag: "2.1.1", Packages: glibcPackages, Why: "multiVolume's pods run GNU dd, sha256sum and base64 in it"},
	{Name: "pause", Tag: "3.10.2", Why: "pods that only have to run (sleep forever)"},
}

// RepoList is the suite's repository list (the YAML file KUBE_TEST_REPO_LIST names): every
// registry the suite knows is Registry.
func RepoList() string {
	keys := []string{"promoterE2eRegistry", "buildImageRegistry", "invalidRegistry", "gcEtcdRegistry",
		"gcRegistry", "sigStorageRegistry", "privateRegistry", "dockerLibraryRegistry", "cloudProviderGcpRegistry"}
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, Registry)
	}
	return b.String()
}

// Packages are the Debian packages SuiteImages are made of.
func Packages() []string {
	names := []string{"busybox-static"}
	for _, img := range SuiteImages {
		for _, p := range img.Packages {
			if !slices.Contains(names, p) {
				names = append(names, p)
			}
		}
	}
	return names
}

// ImageOptions are the inputs of BuildImages.
type ImageOptions struct {
	// BusyboxDeb is Debian's busybox-static package (.deb) for this machine's architecture.
	BusyboxDeb string
	// Debs are the other Packages' .deb files by package name.
	Debs map[string]string
	// Agnhost is a static agnhost binary for this machine's architecture.
	Agnhost string
	// Out is the folder the OCI image-layout tars are written to.
	Out string
	// Created is every image's creation and file time.
	Created time.Time
}

// BuildImages builds SuiteImages for this machine's architecture and writes one OCI
// image-layout tar per image into o.Out, returning their paths.
func BuildImages(ctx context.Context, o ImageOptions) ([]string, error) {
	busybox, version, err := BusyboxFromDeb(ctx, o.BusyboxDeb)
	if err != nil {
		return nil, err
	}
	applets, err := busyboxApplets(ctx, busybox)
	if err != nil {
		return nil, err
	}
	base := BusyboxFiles(busybox, applets)
	agnhost, err := os.ReadFile(o.Agnhost)
	if err != nil {
		return nil, fmt.Errorf("agnhost: %w", err)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	return writeTars(o.Out, SuiteImages, func(img SuiteImage) (v1.ImageIndex, error) {
		files, err := withPackages(ctx, base, o.Debs, img.Packages)
		if err != nil {
			return nil, err
		}
		return buildImage(img, files, agnhost, version, o.Created)
	})
}

// withPackages returns base with the files of the named packages (their .deb files in debs) put
// over it, in order.
func withPackages(ctx context.Context, base []imagebuild.File, debs map[string]string, packages []string) ([]imagebuild.File, error) {
	files := base
	for _, p := range packages {
		extra, err := DebFiles(ctx, debs[p])
		if err != nil {
			return nil, fmt.Errorf("package %s: %w", p, err)
		}
		files = Overlay(files, extra)
	}
	return files, nil
}

// image is what writeTars needs of SuiteImage and UpstreamImage.
type image interface {
	// Ref is the image's full name; fileName its tar's name without ".tar".
	Ref() string
	fileName() string
}

func (i SuiteImage) fileName() string    { return i.Name }
func (i UpstreamImage) fileName() string { return i.Name }

// writeTars builds each of imgs with build and writes it, named by its Ref, as the OCI
// image-layout tar dir/<fileName>.tar; it returns the tars' paths.
func writeTars[I image](dir string, imgs []I, build func(I) (v1.ImageIndex, error)) ([]string, error) {
	var tars []string
	for _, img := range imgs {
		index, err := build(img)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", img.Ref(), err)
		}
		out := filepath.Join(dir, img.fileName()+".tar")
		if err := imagebuild.WriteLayoutFile(out, imagebuild.Tagged{Ref: img.Ref(), Index: index}); err != nil {
			return nil, err
		}
		tars = append(tars, out)
	}
	return tars, nil
}

// buildImage builds one suite image from busybox's files (and agnhost's binary if it wants it).
func buildImage(img SuiteImage, base []imagebuild.File, agnhost []byte, busyboxVersion string, created time.Time) (v1.ImageIndex, error) {
	files := append([]imagebuild.File(nil), base...)
	spec := imagebuild.Image{
		Platforms: []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
		Env:       []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd:       []string{"sh"},
		Created:   created,
		Labels: map[string]string{
			"org.opencontainers.image.title":       img.Name,
			"org.opencontainers.image.description": "Shutter's stand-in for the e2e suite's " + img.Name + " image: Debian busybox-static " + busyboxVersion + "; " + img.Why,
		},
	}
	switch {
	case img.Agnhost:
		files = append(files, imagebuild.File{Path: "/agnhost", Mode: 0o755, Data: agnhost})
		spec.Entrypoint, spec.Cmd = []string{"/agnhost"}, []string{"pause"}
	case img.Name == "pause":
		// Runs until stopped, and stops at once on SIGTERM, as the pause image does.
		spec.Cmd = []string{"sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"}
	}
	spec.Files = func(v1.Platform) ([]imagebuild.File, error) { return files, nil }
	return imagebuild.Build(spec)
}

// BusyboxFiles are the files of a busybox image: the binary at /bin/busybox, a symbolic link to
// it for every applet (applets are paths such as "/usr/bin/env", as `busybox --list-full` prints
// them without the leading slash), root's and nobody's /etc/passwd and /etc/group entries, and a
// sticky, world-writable /tmp.
func BusyboxFiles(busybox []byte, applets []string) []imagebuild.File {
	files := []imagebuild.File{
		{Path: "/bin/busybox", Mode: 0o755, Data: busybox},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\n")},
	}
	seen := map[string]bool{"/bin/busybox": true}
	for _, a := range applets {
		p := path.Clean("/" + strings.TrimSpace(a))
		if p == "/" || seen[p] {
			continue
		}
		seen[p] = true
		files = append(files, imagebuild.File{Path: p, Mode: 0o777, Link: "/bin/busybox"})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files
}

// BusyboxFromDeb returns the busybox binary of a busybox-static package and the package's
// version, read with dpkg-deb (Debian's own tool for its package format).
func BusyboxFromDeb(ctx context.Context, deb string) ([]byte, string, error) {
	out, err := exec.CommandContext(ctx, "dpkg-deb", "--field", deb, "Package", "Version").Output()
	if err != nil {
		return nil, "", fmt.Errorf("dpkg-deb --field %s: %w", deb, err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if fields["Package"] != "busybox-static" {
		return nil, "", fmt.Errorf("%s is package %q, want busybox-static", deb, fields["Package"])
	}
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		return nil, "", fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, stderr.String())
	}
	bin, err := fileFromTar(bytes.NewReader(data), "bin/busybox", "usr/bin/busybox")
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", deb, err)
	}
	return bin, fields["Version"], nil
}

// fileFromTar returns the content of the first regular file of the tar stream named one of names
// (relative, with or without a leading "./").
func fileFromTar(r io.Reader, names ...string) ([]byte, error) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("no %s in the package", strings.Join(names, " or "))
		} else if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(path.Clean(h.Name), "./")
		for _, n := range names {
			if name == n && h.Typeflag == tar.TypeReg {
				return io.ReadAll(tr)
			}
		}
	}
}

// busyboxApplets runs the binary (built for this machine) to list its applets' paths.
func busyboxApplets(ctx context.Context, busybox []byte) ([]string, error) {
	dir, err := os.MkdirTemp("", "busybox-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "busybox")
	if err := os.WriteFile(bin, busybox, 0o755); err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, bin, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list-full: %w", err)
	}
	applets := strings.Fields(string(out))
	if len(applets) == 0 {
		return nil, errors.New("busybox --list-full printed no applet")
	}
	return applets, nil
}

// skippedPrefixes are folders of a package that no program reads.
var skippedPrefixes = []string{"usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/"}

// DebFiles returns the files, folders and links of a Debian package (.deb) as image files,
// without documentation, read with dpkg-deb. A hard link becomes a copy of its target.
func DebFiles(ctx context.Context, deb string) ([]imagebuild.File, error) {
	if deb == "" {
		return nil, errors.New("no .deb given")
	}
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, stderr.String())
	}
	var files []imagebuild.File
	regular := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", deb, err)
		}
		name := strings.TrimPrefix(path.Clean(h.Name), "./")
		if name == "." || name == "" || slices.ContainsFunc(skippedPrefixes, func(p string) bool { return strings.HasPrefix(name+"/", p) }) {
			continue
		}
		f := imagebuild.File{Path: "/" + name, Mode: fs.FileMode(h.Mode & 0o777)}
		if h.Mode&0o1000 != 0 {
			f.Mode |= fs.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			f.Mode |= fs.ModeDir
		case tar.TypeSymlink:
			f.Link = h.Linkname
		case tar.TypeLink:
			f.Data = regular[strings.TrimPrefix(path.Clean(h.Linkname), "./")]
		case tar.TypeReg:
			if f.Data, err = io.ReadAll(tr); err != nil {
				return nil, err
			}
			regular[name] = f.Data
		default:
			continue
		}
		files = append(files, f)
	}
}

// Overlay returns base with extra laid over it: an entry of extra replaces base's entry of the
// same path, but a folder never replaces a folder (the first one's mode stays).
func Overlay(base, extra []imagebuild.File) []imagebuild.File {
	byPath := make(map[string]imagebuild.File, len(base)+len(extra))
	for _, f := range base {
		byPath[path.Clean(f.Path)] = f
	}
	for _, f := range extra {
		p := path.Clean(f.Path)
		if old, ok := byPath[p]; ok && old.Mode.IsDir() && f.Mode.IsDir() {
			continue
		}
		f.Path = p
		byPath[p] = f
	}
	out := make([]imagebuild.File, 0, len(byPath))
	for _, f := range byPath {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// FetchDebs makes sure dir holds a .deb of each package for this machine's architecture (or
// "all"), downloading the missing ones with apt-get (after an apt-get update if the first try
// fails), and returns their paths by package name.
func FetchDebs(ctx context.Context, dir string, names []string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	find := func() (map[string]string, []string) {
		found, missing := map[string]string{}, []string(nil)
		for _, n := range names {
			var matches []string
			for _, arch := range []string{debArch(), "all"} {
				m, _ := filepath.Glob(filepath.Join(dir, n+"_*_"+arch+".deb"))
				matches = append(matches, m...)
			}
			if len(matches) == 0 {
				missing = append(missing, n)
				continue
			}
			sort.Strings(matches)
			found[n] = matches[len(matches)-1]
		}
		return found, missing
	}
	found, missing := find()
	if len(missing) == 0 {
		return found, nil
	}
	download := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"download"}, missing...)...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
		return cmd.Run()
	}
	if err := download(); err != nil {
		update := exec.CommandContext(ctx, "apt-get", "update")
		update.Stdout, update.Stderr = os.Stderr, os.Stderr
		if uerr := update.Run(); uerr != nil {
			return nil, fmt.Errorf("apt-get update: %w", uerr)
		}
		if err := download(); err != nil {
			return nil, fmt.Errorf("apt-get download %s: %w", strings.Join(missing, " "), err)
		}
	}
	if found, missing = find(); len(missing) > 0 {
		return nil, fmt.Errorf("apt-get download left out %s", strings.Join(missing, " "))
	}
	return found, nil
}

// debArch is Debian's name of this machine's architecture.
func debArch() string {
	switch runtime.GOARCH {
	case "arm":
		return "armhf"
	case "386":
		return "i386"
	default: // amd64, arm64, ppc64le (ppc64el), s390x, riscv64
		if runtime.GOARCH == "ppc64le" {
			return "ppc64el"
		}
		return runtime.GOARCH
	}
}
