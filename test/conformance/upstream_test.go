package conformance

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestBuildUpstreamImages: the reference stack's images carry the names stack.yaml uses; the
// driver's holds its binary as entrypoint over busybox and the packages' programs (mount over
// busybox's applet), a sidecar's only its binary.
func TestBuildUpstreamImages(t *testing.T) {
	debDir := t.TempDir()
	fakeDeb(t, debDir, "busybox-static", map[string]string{"bin/busybox": "#!/bin/sh\necho bin/sh; echo bin/mount; echo bin/tar\n"})
	fakeDeb(t, debDir, "mount", map[string]string{"bin/mount": "util-linux mount", "sbin/losetup": "losetup"})
	for _, p := range hostpathPackages[1:] {
		fakeDeb(t, debDir, p, map[string]string{"usr/lib/" + p + ".so": p})
	}
	debs, err := FetchDebs(context.Background(), debDir, UpstreamPackages())
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, img := range UpstreamImages {
		if err := os.WriteFile(filepath.Join(bin, img.Name), []byte(img.Name+" binary"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tars, err := BuildUpstreamImages(context.Background(), UpstreamOptions{Debs: debs, BinDir: bin, Out: t.TempDir(), Created: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"localhost/upstream/hostpathplugin:v1.18.0", "localhost/upstream/csi-node-driver-registrar:v2.17.0",
		"localhost/upstream/csi-snapshotter:v8.6.0", "localhost/upstream/snapshot-controller:v8.6.0"}
	got := imageNames(t, tars)
	if !slices.Equal(got, want) {
		t.Fatalf("image names %q, want %q", got, want)
	}
	base := BusyboxFiles([]byte("busybox binary"), []string{"bin/sh", "bin/mount", "bin/tar"})
	for _, tc := range []struct {
		image UpstreamImage
		files map[string]string // path: link target, or "file:<content>"
	}{
		{image: UpstreamImages[0], files: map[string]string{"hostpathplugin": "file:binary", "bin/mount": "file:util-linux mount",
			"sbin/losetup": "file:losetup", "bin/tar": "/bin/busybox", "usr/lib/libc6.so": "file:libc6"}},
		{image: UpstreamImages[1], files: map[string]string{"csi-node-driver-registrar": "file:binary"}},
	} {
		index, err := upstreamImage(context.Background(), tc.image, base, debs, []byte("binary"), time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		img, cfg := imageConfig(t, index)
		if want := []string{"/" + tc.image.Name}; !slices.Equal(cfg.Config.Entrypoint, want) {
			t.Errorf("%s: entrypoint %q, want %q", tc.image.Name, cfg.Config.Entrypoint, want)
		}
		entries := layerEntries(t, img)
		for name, w := range tc.files {
			if entries[name] != w {
				t.Errorf("%s: %s: %q, want %q", tc.image.Name, name, entries[name], w)
			}
		}
		if len(tc.image.Packages) == 0 && len(entries) != 1 {
			t.Errorf("%s has %d entries, want its binary alone: %v", tc.image.Name, len(entries), entries)
		}
	}
}
