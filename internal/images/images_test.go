package images

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	"github.com/shutter-csi/shutter/internal/imagebuild"
)

// The test build: every component for the host's platform, and the smallest one (fewest
// dependencies to cross-compile) for both default platforms as well.
const (
	testVersion = "v0.0.0-test.1"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
	twoPlatform = "hostpath-driver"
	fakeCA      = "-----BEGIN CERTIFICATE-----\nnot a real certificate\n-----END CERTIFICATE-----\n"
)

var testCreated = time.Unix(1750000000, 0).UTC()

// testOptions are the options of a test build into buildDir for platforms.
func testOptions(t *testing.T, buildDir string, platforms []string, only ...string) Options {
	t.Helper()
	p, err := imagebuild.Platforms(platforms...)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte(fakeCA), 0o644); err != nil {
		t.Fatal(err)
	}
	const pkg = "github.com/shutter-csi/shutter/pkg/version"
	return Options{
		Dir: "../..", Version: testVersion, Commit: testCommit, Created: testCreated,
		LDFlags:   fmt.Sprintf("-X %s.Version=%s -X %s.Commit=%s", pkg, testVersion, pkg, testCommit),
		Platforms: p, CACertificates: ca, BuildDir: buildDir, Only: only, Log: testLog{t},
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

var (
	buildOnce    sync.Once
	builtResults map[string]Result
	buildErr     error
)

// built builds the test images once per test binary and returns them by component name.
func built(t *testing.T) map[string]Result {
	t.Helper()
	if testing.Short() {
		t.Skip("cross-compiles the components")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "shutter-images-test-")
		if err != nil {
			buildErr = err
			return
		}
		defer os.RemoveAll(dir)
		host := runtime.GOOS + "/" + runtime.GOARCH
		builtResults = map[string]Result{}
		var others []string
		for _, c := range Components {
			if c.Name != twoPlatform {
				others = append(others, c.Name)
			}
		}
		for _, part := range []struct {
			platforms []string
			only      []string
		}{{DefaultPlatforms, []string{twoPlatform}}, {[]string{host}, others}} {
			results, err := Build(context.Background(), testOptions(t, dir, part.platforms, part.only...))
			if err != nil {
				buildErr = err
				return
			}
			for _, r := range results {
				// The layers are in memory: the binaries under dir can go.
				builtResults[r.Component.Name] = r
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtResults
}

func TestImageConfigs(t *testing.T) {
	results := built(t)
	for _, c := range Components {
		t.Run(c.Name, func(t *testing.T) {
			r := results[c.Name]
			if want := DefaultRegistry + "/" + c.Name + ":" + testVersion; r.Ref != want {
				t.Errorf("ref %q, want %q", r.Ref, want)
			}
			m, err := r.Index.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			var platforms []string
			for _, d := range m.Manifests {
				platforms = append(platforms, d.Platform.String())
				img, err := r.Index.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				checkConfig(t, c, img, d.Platform)
			}
			want := []string{runtime.GOOS + "/" + runtime.GOARCH}
			if c.Name == twoPlatform {
				want = DefaultPlatforms
			}
			if !reflect.DeepEqual(platforms, want) {
				t.Errorf("platforms %v, want %v", platforms, want)
			}
		})
	}
}

func checkConfig(t *testing.T, c Component, img v1.Image, p *v1.Platform) {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantUser := "65532:65532"
	if c.Name == "hostpath-driver" {
		wantUser = "0:0"
	}
	if cfg.Config.User != wantUser {
		t.Errorf("%s: user %q, want %q", p, cfg.Config.User, wantUser)
	}
	want := map[string]string{"snapshot-controller": "/snapshot-controller", "csi-snapshotter": "/csi-snapshotter",
		"hostpath-driver": "/usr/local/bin/hostpath-driver", "snapshot-conversion-webhook": "/usr/local/bin/snapshot-conversion-webhook",
		"csi-snapshot-metadata": "/csi-snapshot-metadata"}
	if want := []string{want[c.Name]}; !reflect.DeepEqual(cfg.Config.Entrypoint, want) {
		t.Errorf("%s: entrypoint %q, want %q", p, cfg.Config.Entrypoint, want)
	}
	if cfg.OS != p.OS || cfg.Architecture != p.Architecture || !cfg.Created.Time.Equal(testCreated) {
		t.Errorf("%s: config says %s/%s created %s", p, cfg.OS, cfg.Architecture, cfg.Created)
	}
	for key, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/shutter-csi/shutter",
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testCommit,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.title":    c.Name,
	} {
		if got := cfg.Config.Labels[key]; got != want {
			t.Errorf("%s: label %s = %q, want %q", p, key, got, want)
		}
	}
	files := layerFiles(t, img)
	if c.UpstreamPath {
		if link := string(files["usr/local/bin/"+c.Name]); link != "-> /"+c.Name {
			t.Errorf("%s: usr/local/bin/%s is %q, want a link to /%s", p, c.Name, link, c.Name)
		}
	}
	for _, shell := range []string{"bin/sh", "bin/bash", "bin/busybox"} {
		if _, ok := files[shell]; ok {
			t.Errorf("%s: the image has a shell, %s", p, shell)
		}
	}
	ca, hasCA := files["etc/ssl/certs/ca-certificates.crt"]
	if hasCA != c.CACertificates || (hasCA && string(ca) != fakeCA) {
		t.Errorf("%s: CA bundle present %t (want %t), content %q", p, hasCA, c.CACertificates, ca)
	}
	if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd %q", p, files["etc/passwd"])
	}
}

// layerFiles returns the regular files of img's one layer by path (without the leading /).
func layerFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, err %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
		if h.Typeflag == tar.TypeSymlink {
			files[h.Name] = []byte("-> " + h.Linkname)
		}
	}
}

// TestBinariesReportVersion extracts each host-platform image's binary and runs --version.
func TestBinariesReportVersion(t *testing.T) {
	results := built(t)
	if runtime.GOOS != "linux" {
		t.Skip("the images hold linux binaries")
	}
	host := v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	dir := t.TempDir()
	for _, c := range Components {
		t.Run(c.Name, func(t *testing.T) {
			img, err := imageFor(results[c.Name].Index, host)
			if err != nil {
				t.Fatal(err)
			}
			bin := filepath.Join(dir, c.Name)
			if err := os.WriteFile(bin, layerFiles(t, img)[strings.TrimPrefix(c.Binary(), "/")], 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "--version").CombinedOutput()
			want := fmt.Sprintf("%s %s (commit %s)\n", c.Name, testVersion, testCommit)
			if err != nil || string(out) != want {
				t.Fatalf("--version: err %v, output %q, want %q", err, out, want)
			}
		})
	}
}

func imageFor(idx v1.ImageIndex, p v1.Platform) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Satisfies(p) {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for %s", p)
}

// TestReproducible builds one component again into a fresh folder (a new link of the binaries)
// and expects the same index digest.
func TestReproducible(t *testing.T) {
	first := built(t)[twoPlatform]
	again, err := Build(t.Context(), testOptions(t, t.TempDir(), DefaultPlatforms, twoPlatform))
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Index.Digest()
	d2, _ := again[0].Index.Digest()
	if d1 != d2 {
		t.Fatalf("two builds: %s and %s", d1, d2)
	}
	t.Logf("%s: %s in both builds", twoPlatform, d1)
}

// TestPush pushes an index to an in-process registry on loopback and reads it back.
func TestPush(t *testing.T) {
	r := built(t)[twoPlatform]
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	prefix := strings.TrimPrefix(srv.URL, "http://") + "/team"
	var pushLog bytes.Buffer
	pushed, err := Push(t.Context(), prefix, []Result{r}, &pushLog)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := r.Index.Digest()
	if len(pushed) != 1 || pushed[0].Digest != want || pushed[0].Ref != prefix+"/hostpath-driver:"+testVersion {
		t.Fatalf("pushed %+v, want digest %s", pushed, want)
	}
	ref, err := name.ParseReference(pushed[0].Ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(ref, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := got.Digest(); d != want {
		t.Fatalf("registry holds %s, want %s", d, want)
	}
}

func TestWriteTars(t *testing.T) {
	r := built(t)[twoPlatform]
	dir := t.TempDir()
	if err := WriteTars(dir, []Result{r}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(TarPath(dir, twoPlatform)); err != nil {
		t.Fatal(err)
	}
}

// TestChartAgrees: the chart's default registry and repositories are the images' names.
func TestChartAgrees(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/helm/shutter/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Global struct {
			ImageRegistry string `json:"imageRegistry"`
		} `json:"global"`
		SnapshotController struct{ Image image } `json:"snapshotController"`
		Hostpath           struct {
			Driver           struct{ Image image } `json:"driver"`
			Snapshotter      struct{ Image image } `json:"snapshotter"`
			SnapshotMetadata struct{ Image image } `json:"snapshotMetadata"`
		} `json:"hostpath"`
		ConversionWebhook struct{ Image image } `json:"conversionWebhook"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	if values.Global.ImageRegistry != DefaultRegistry {
		t.Errorf("chart registry %q, images use %q", values.Global.ImageRegistry, DefaultRegistry)
	}
	got := []string{values.SnapshotController.Image.Repository, values.Hostpath.Snapshotter.Image.Repository,
		values.Hostpath.Driver.Image.Repository, values.ConversionWebhook.Image.Repository,
		values.Hostpath.SnapshotMetadata.Image.Repository}
	var want []string
	for _, c := range Components {
		want = append(want, c.Name)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("chart repositories %v, components %v", got, want)
	}
	for _, tag := range []string{values.SnapshotController.Image.Tag, values.Hostpath.Driver.Image.Tag,
		values.Hostpath.Snapshotter.Image.Tag, values.ConversionWebhook.Image.Tag, values.Hostpath.SnapshotMetadata.Image.Tag} {
		if tag != "" {
			t.Errorf("chart pins tag %q; Shutter's images default to the appVersion", tag)
		}
	}
}

type image struct {
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
}

func TestDefaultPlatforms(t *testing.T) {
	if want := []string{"linux/amd64", "linux/arm64"}; !reflect.DeepEqual(DefaultPlatforms, want) {
		t.Fatalf("default platforms %v", DefaultPlatforms)
	}
	if _, err := selectComponents([]string{"nope"}); err == nil {
		t.Fatal("an unknown component was accepted")
	}
}
