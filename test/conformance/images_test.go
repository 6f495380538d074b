package conformance

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/shutter-csi/shutter/test/cluster"
)

// fakeDeb builds a Debian package of the given files (path relative to the root: content) in
// dir and returns its path.
func fakeDeb(t *testing.T, dir, name string, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb is not installed")
	}
	root := filepath.Join(t.TempDir(), name)
	control := "Package: " + name + "\nVersion: 1:9.9-1\nArchitecture: all\nMaintainer: test <t@example.invalid>\nDescription: test\n"
	files["DEBIAN/control"] = control
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(dir, name+"_9.9-1_all.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", root, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, out)
	}
	return deb
}

func TestBuildImages(t *testing.T) {
	debDir := t.TempDir()
	// busybox-static's "busybox" lists three applets, one of them twice and one being busybox
	// itself; coreutils brings a GNU dd.
	fakeDeb(t, debDir, "busybox-static", map[string]string{
		"bin/busybox": "#!/bin/sh\necho bin/sh; echo usr/bin/env; echo bin/sh; echo bin/busybox; echo bin/dd\n",
	})
	fakeDeb(t, debDir, "coreutils", map[string]string{"bin/dd": "GNU dd", "usr/share/doc/coreutils/README": "doc"})
	fakeDeb(t, debDir, "dash", map[string]string{"bin/dash": "dash"})
	for _, p := range glibcPackages[2:] {
		fakeDeb(t, debDir, p, map[string]string{"usr/lib/" + p + ".so": p})
	}
	debs, err := FetchDebs(context.Background(), debDir, Packages())
	if err != nil {
		t.Fatal(err)
	}
	agnhost := filepath.Join(t.TempDir(), "agnhost")
	if err := os.WriteFile(agnhost, []byte("agnhost binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	tars, err := BuildImages(context.Background(), ImageOptions{BusyboxDeb: debs["busybox-static"], Debs: debs, Agnhost: agnhost, Out: out, Created: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	// The names the pinned suite asks for (test/utils/image/manifest.go of k8s.io/kubernetes
	// v1.37.2), under the local prefix.
	want := []string{
		"localhost/shutter/e2e/busybox:1.37.0-2",
		"localhost/shutter/e2e/agnhost:2.66.1",
		"localhost/shutter/e2e/nginx:1.27.0-2",
		"localhost/shutter/e2e/glibc-dns-testing:2.1.1",
		"localhost/shutter/e2e/pause:3.10.2",
	}
	got := imageNames(t, tars)
	if !slices.Equal(got, want) {
		t.Errorf("image names %q, want %q", got, want)
	}
}

// imageNames are the names of the images in the tars, in order.
func imageNames(t *testing.T, tars []string) []string {
	t.Helper()
	var got []string
	for _, tarPath := range tars {
		names, err := cluster.ImageNames(tarPath)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, names...)
	}
	return got
}

func TestOverlayPackages(t *testing.T) {
	debDir := t.TempDir()
	deb := fakeDeb(t, debDir, "coreutils", map[string]string{"bin/dd": "GNU dd", "usr/share/doc/coreutils/README": "doc"})
	extra, err := DebFiles(context.Background(), deb)
	if err != nil {
		t.Fatal(err)
	}
	base := BusyboxFiles([]byte("busybox binary"), []string{"bin/sh", "bin/dd"})
	files := Overlay(base, extra)
	got := map[string]string{}
	for _, f := range files {
		switch {
		case f.Link != "":
			got[f.Path] = f.Link
		case f.Mode.IsDir():
			got[f.Path] = "dir"
		default:
			got[f.Path] = "file:" + string(f.Data)
		}
	}
	want := map[string]string{"/bin/dd": "file:GNU dd", "/bin/sh": "/bin/busybox", "/bin": "dir", "/tmp": "dir"}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %q, want %q", p, got[p], w)
		}
	}
	if _, ok := got["/usr/share/doc/coreutils/README"]; ok {
		t.Error("the package's documentation is in the image")
	}
	for _, f := range files {
		if f.Path == "/tmp" && f.Mode&fs.ModeSticky == 0 {
			t.Error("/tmp lost its sticky bit")
		}
	}
}

func TestSuiteImageFiles(t *testing.T) {
	base := BusyboxFiles([]byte("busybox binary"), []string{"bin/sh", "usr/bin/env", "bin/sh", "bin/busybox", "sbin/nsenter"})
	for _, tc := range []struct {
		image      SuiteImage
		entrypoint []string
		files      map[string]string // path: link target, or "file:<content>"
	}{
		{
			image: SuiteImage{Name: "busybox", Tag: "1"},
			files: map[string]string{
				"bin/busybox": "file:busybox binary", "bin/sh": "/bin/busybox",
				"usr/bin/env": "/bin/busybox", "sbin/nsenter": "/bin/busybox",
			},
		},
		{
			image:      SuiteImage{Name: "agnhost", Tag: "1", Agnhost: true},
			entrypoint: []string{"/agnhost"},
			files:      map[string]string{"agnhost": "file:agnhost binary", "bin/sh": "/bin/busybox"},
		},
	} {
		t.Run(tc.image.Name, func(t *testing.T) {
			index, err := buildImage(tc.image, base, []byte("agnhost binary"), "1", time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			img, cfg := imageConfig(t, index)
			if !slices.Equal(cfg.Config.Entrypoint, tc.entrypoint) {
				t.Errorf("entrypoint %q, want %q", cfg.Config.Entrypoint, tc.entrypoint)
			}
			if cfg.Architecture != runtime.GOARCH {
				t.Errorf("architecture %s, want %s", cfg.Architecture, runtime.GOARCH)
			}
			entries := layerEntries(t, img)
			for name, want := range tc.files {
				if got, ok := entries[name]; !ok || got != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
			if got := entries["tmp/"]; got != "dir:1777" {
				t.Errorf("tmp/: %q, want a sticky world-writable folder", got)
			}
		})
	}
}

// imageConfig is the one image of index and its configuration.
func imageConfig(t *testing.T, index v1.ImageIndex) (v1.Image, *v1.ConfigFile) {
	t.Helper()
	img := onlyImage(t, index)
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return img, cfg
}

func onlyImage(t *testing.T, index v1.ImageIndex) v1.Image {
	t.Helper()
	m, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%d manifests, want 1", len(m.Manifests))
	}
	img, err := index.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// layerEntries maps the one layer's entries to their link target, "file:<content>" or
// "dir:<mode>".
func layerEntries(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		} else if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeSymlink:
			entries[h.Name] = h.Linkname
		case tar.TypeDir:
			entries[h.Name] = "dir:" + modeString(h.Mode)
		default:
			data, _ := io.ReadAll(tr)
			entries[h.Name] = "file:" + string(data)
		}
	}
}

func modeString(m int64) string {
	return string([]byte{'0' + byte(m>>9&7), '0' + byte(m>>6&7), '0' + byte(m>>3&7), '0' + byte(m&7)})
}
