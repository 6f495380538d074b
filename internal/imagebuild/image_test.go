package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var testTime = time.Unix(1700000000, 0).UTC()

func testSpec() Image {
	platforms, _ := Platforms("linux/amd64", "linux/arm64")
	return Image{
		Platforms: platforms,
		Files: func(p v1.Platform) ([]File, error) {
			files := UserFiles("nonroot", 65532)
			return append(files,
				File{Path: "/usr/local/bin/tool", Mode: 0o755, Data: []byte("binary for " + p.Architecture)},
				File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777}), nil
		},
		Entrypoint:  []string{"/usr/local/bin/tool"},
		User:        "65532:65532",
		Labels:      map[string]string{"org.opencontainers.image.version": "v1.2.3"},
		Annotations: map[string]string{"org.opencontainers.image.revision": "abc"},
		Created:     testTime,
	}
}

func TestBuildIsReproducible(t *testing.T) {
	first, err := Build(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	second, err := Build(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Digest()
	d2, _ := second.Digest()
	if d1 != d2 {
		t.Fatalf("two builds of the same spec: digests %s and %s", d1, d2)
	}
	changed := testSpec()
	changed.Created = testTime.Add(time.Second)
	third, err := Build(changed)
	if err != nil {
		t.Fatal(err)
	}
	if d3, _ := third.Digest(); d3 == d1 {
		t.Fatalf("a different creation time gave the same digest %s", d3)
	}
}

func TestBuildConfigAndIndex(t *testing.T) {
	idx, err := Build(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || m.Annotations["org.opencontainers.image.revision"] != "abc" {
		t.Fatalf("index media type %s, annotations %v", m.MediaType, m.Annotations)
	}
	var archs []string
	for _, d := range m.Manifests {
		archs = append(archs, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != d.Platform.Architecture || cfg.OS != "linux" || !cfg.Created.Time.Equal(testTime) {
			t.Errorf("%s: config platform %s/%s created %s", d.Digest, cfg.OS, cfg.Architecture, cfg.Created)
		}
		if cfg.Config.User != "65532:65532" || !reflect.DeepEqual(cfg.Config.Entrypoint, []string{"/usr/local/bin/tool"}) ||
			cfg.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" {
			t.Errorf("%s: config %+v", d.Digest, cfg.Config)
		}
		mf, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if mf.MediaType != types.OCIManifestSchema1 || mf.Config.MediaType != types.OCIConfigJSON ||
			len(mf.Layers) != 1 || mf.Layers[0].MediaType != types.OCILayer {
			t.Errorf("%s: manifest %+v", d.Digest, mf)
		}
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !reflect.DeepEqual(archs, want) {
		t.Fatalf("platforms %v, want %v", archs, want)
	}
}

func TestLayerEntries(t *testing.T) {
	layer, err := Layer([]File{
		{Path: "/usr/local/bin/tool", Mode: 0o755, Data: []byte("x")},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0::/:/sbin/nologin\n")},
		{Path: "/data", Mode: fs.ModeDir | 0o700, UID: 65532, GID: 65532},
	}, testTime)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(testTime) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: time %s, owner names %q %q", h.Name, h.ModTime, h.Uname, h.Gname)
		}
		got = append(got, h.Name+" "+modeString(h))
	}
	want := []string{"data/ 700 65532", "etc/ 755 0", "etc/passwd 644 0", "usr/ 755 0",
		"usr/local/ 755 0", "usr/local/bin/ 755 0", "usr/local/bin/tool 755 0"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("entries\n%q\nwant\n%q", got, want)
	}
}

func modeString(h *tar.Header) string { return fmt.Sprintf("%o %d", h.Mode, h.Uid) }

func TestLayerRejectsBadPaths(t *testing.T) {
	for name, files := range map[string][]File{
		"relative":     {{Path: "etc/passwd"}},
		"root":         {{Path: "/"}},
		"twice":        {{Path: "/a"}, {Path: "/a/"}},
		"under a file": {{Path: "/a"}, {Path: "/a/b"}},
	} {
		if _, err := Layer(files, testTime); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// readLayout reads a layout tar into its entry names (in order) and contents.
func readLayout(t *testing.T, r io.Reader) ([]string, map[string][]byte) {
	t.Helper()
	var names []string
	content := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, content
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(layoutTime) {
			t.Errorf("%s: time %s", h.Name, h.ModTime)
		}
		names = append(names, h.Name)
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		content[h.Name] = b
	}
}

func TestWriteLayout(t *testing.T) {
	idx, err := Build(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	const ref = "registry.example/shutter/tool:v1.2.3"
	if err := WriteLayout(&out, Tagged{Ref: ref, Index: idx}); err != nil {
		t.Fatal(err)
	}
	names, content := readLayout(t, bytes.NewReader(out.Bytes()))
	if string(content["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %q", content["oci-layout"])
	}
	// 1 index + 2 × (manifest, config, layer) blobs, two directories, index.json, oci-layout.
	if len(names) != 11 || names[0] != "blobs/" || names[len(names)-1] != "oci-layout" {
		t.Errorf("entries %q", names)
	}
	for name, b := range content {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && hexDigest != "" {
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != hexDigest {
				t.Errorf("blob %s has digest %x", name, sum)
			}
		}
	}
	var top v1.IndexManifest
	if err := json.Unmarshal(content["index.json"], &top); err != nil {
		t.Fatal(err)
	}
	digest, _ := idx.Digest()
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != digest || top.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json %s", content["index.json"])
	}
	ann := top.Manifests[0].Annotations
	if ann[AnnotationImageName] != ref || ann[AnnotationRefName] != "v1.2.3" {
		t.Fatalf("index.json annotations %v", ann)
	}
	var again bytes.Buffer
	if err := WriteLayout(&again, Tagged{Ref: ref, Index: idx}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), again.Bytes()) {
		t.Fatal("two layouts of the same index differ")
	}
	if err := WriteLayout(io.Discard, Tagged{Ref: "no-tag", Index: idx}); err == nil {
		t.Fatal("a reference without a tag was accepted")
	}
}

func TestWriteLayoutFile(t *testing.T) {
	idx, err := Build(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tool.tar")
	if err := WriteLayoutFile(path, Tagged{Ref: "registry.example/tool:v1", Index: idx}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if names, _ := readLayout(t, f); len(names) != 11 {
		t.Fatalf("entries %q", names)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestGzipHasNoTime(t *testing.T) {
	b, err := gzipBytes([]byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Fatalf("gzip header time %s name %q", zr.ModTime, zr.Name)
	}
}

func TestGoBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go program twice")
	}
	dir := t.TempDir()
	host := v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	b := GoBuild{Package: "./testdata/hello", LDFlags: "-X 'main.message=stamped v1'"}
	for _, out := range []string{"a", "b"} {
		if err := b.Build(t.Context(), host, filepath.Join(dir, out)); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a"))
	c, _ := os.ReadFile(filepath.Join(dir, "b"))
	if len(a) == 0 || !bytes.Equal(a, c) {
		t.Fatalf("two builds differ (%d and %d bytes)", len(a), len(c))
	}
	got, err := exec.Command(filepath.Join(dir, "a")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != "stamped v1" {
		t.Fatalf("binary printed %q", got)
	}
	if err := b.Build(t.Context(), v1.Platform{OS: "linux"}, filepath.Join(dir, "c")); err == nil {
		t.Fatal("a platform without architecture was accepted")
	}
}
