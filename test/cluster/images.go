package cluster

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/shutter-csi/shutter/internal/imagebuild"
)

// PauseImage is the name of the node's sandbox image, built from test/images/pause. A pull of it
// could only go to loopback, and none is made: containerd pins it and it is imported at start.
const PauseImage = "localhost/shutter/pause:1.0"

// ProvisionerRepository is the name, without tag, of the external-provisioner image built for
// the node from the csi-provisioner binary of hack/tools/provisioner; the tag is its version.
const ProvisionerRepository = "localhost/shutter/csi-provisioner"

// WorkloadImage is the name of the test image of the demo's and e2e's workload pods, built from
// test/images/workload (writes or reads files and prints their checksums).
const WorkloadImage = "localhost/shutter/workload:1.0"

// BuildWorkloadImage builds the workload image for this machine's architecture and writes it to
// out as an OCI image-layout tar.
func BuildWorkloadImage(ctx context.Context, out string) error {
	return BuildGoImage(ctx, filepath.Join(sourceRoot(), "test", "images", "workload"), WorkloadImage, "65532:65532", out)
}

// ChartImageRegistry is the registry part of the names BuildChartImages gives Shutter's images
// (tag "e2e"); a node's chart values point global.imageRegistry at it.
const ChartImageRegistry = "localhost/shutter-e2e"

// BuildChartImages builds what the chart runs on a local node, as OCI image-layout tars in dir:
// this checkout's images of components for this machine's platform (hack/images, named
// ChartImageRegistry/<component>:e2e), the workload image and the external-provisioner image of
// the csi-provisioner binary in binDir. It returns their paths, the components' first.
func BuildChartImages(ctx context.Context, binDir, dir string, components ...string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/images", "-version=e2e", "-commit=e2e",
		"-registry="+ChartImageRegistry, "-platforms=linux/"+runtime.GOARCH, "-out="+dir,
		"-only="+strings.Join(components, ","))
	cmd.Dir = sourceRoot()
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("hack/images: %w\n%s", err, b)
	}
	var tars []string
	for _, c := range components {
		tars = append(tars, filepath.Join(dir, c+".tar"))
	}
	workload := filepath.Join(dir, "workload.tar")
	if err := BuildWorkloadImage(ctx, workload); err != nil {
		return nil, err
	}
	provisioner := filepath.Join(dir, "csi-provisioner.tar")
	if _, err := WriteProvisionerImage(binDir, provisioner); err != nil {
		return nil, err
	}
	return append(tars, workload, provisioner), nil
}

// sourceRoot is the repository's root folder.
func sourceRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// buildPauseImage builds the sandbox image for this machine's architecture and writes it as an
// OCI image-layout tar to out.
func buildPauseImage(ctx context.Context, out string) error {
	return BuildGoImage(ctx, filepath.Join(sourceRoot(), "test", "images", "pause"), PauseImage, "65535:65535", out)
}

// BuildGoImage builds the main package in folder pkgDir, static and for this machine's
// architecture, into an image named ref whose entrypoint it is, run as user, and writes it to out
// as an OCI image-layout tar.
func BuildGoImage(ctx context.Context, pkgDir, ref, user, out string) error {
	bin := out + ".bin"
	defer os.Remove(bin)
	if err := (imagebuild.GoBuild{Dir: pkgDir, Package: "."}).Build(ctx, hostPlatform(), bin); err != nil {
		return err
	}
	return writeBinaryImage(out, ref, bin, "/"+filepath.Base(pkgDir), user)
}

// ProvisionerImage returns the reference of the node's external-provisioner image: its version
// is the one hack/tools/provisioner pins.
func ProvisionerImage() (string, error) {
	const module = "github.com/kubernetes-csi/external-provisioner/v6"
	f, err := os.Open(filepath.Join(sourceRoot(), "hack", "tools", "provisioner", "go.mod"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == module {
			return ProvisionerRepository + ":" + fields[1], nil
		}
	}
	return "", fmt.Errorf("hack/tools/provisioner/go.mod does not require %s", module)
}

// WriteProvisionerImage wraps the csi-provisioner binary from binDir (a static build of
// hack/tools/provisioner) into the node's external-provisioner image, written to out as an OCI
// image-layout tar, and returns its reference.
func WriteProvisionerImage(binDir, out string) (string, error) {
	ref, err := ProvisionerImage()
	if err != nil {
		return "", err
	}
	return ref, writeBinaryImage(out, ref, filepath.Join(binDir, "csi-provisioner"), "/csi-provisioner", "65532:65532")
}

func hostPlatform() v1.Platform { return v1.Platform{OS: "linux", Architecture: runtime.GOARCH} }

// writeBinaryImage writes an image for this machine's architecture holding one static binary as
// its entrypoint, run as user.
func writeBinaryImage(out, ref, binary, entrypoint, user string) error {
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	index, err := imagebuild.Build(imagebuild.Image{
		Platforms: []v1.Platform{hostPlatform()},
		Files: func(v1.Platform) ([]imagebuild.File, error) {
			return []imagebuild.File{{Path: entrypoint, Mode: 0o755, Data: data}}, nil
		},
		Entrypoint: []string{entrypoint},
		User:       user,
		Created:    time.Unix(0, 0).UTC(),
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return imagebuild.WriteLayoutFile(out, imagebuild.Tagged{Ref: ref, Index: index})
}

// ImageNames lists the names an OCI image-layout tar gives its images on import (the
// io.containerd.image.name annotations of its index.json).
func ImageNames(tarPath string) ([]string, error) {
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s: no index.json", tarPath)
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", tarPath, err)
		}
		if path.Clean(h.Name) != "index.json" {
			continue
		}
		var index v1.IndexManifest
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return nil, fmt.Errorf("%s index.json: %w", tarPath, err)
		}
		var names []string
		for _, m := range index.Manifests {
			if n := m.Annotations[imagebuild.AnnotationImageName]; n != "" {
				names = append(names, n)
			}
		}
		return names, nil
	}
}
