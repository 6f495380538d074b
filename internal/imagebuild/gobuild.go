package imagebuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// GoBuild is a static (CGO_ENABLED=0), reproducible build of one Go main package: -trimpath, no
// VCS stamping, symbols stripped, the baseline instruction set of each architecture.
type GoBuild struct {
	// Dir is the directory go build runs in (inside the package's module); "" is the current one.
	Dir string
	// Package is the main package, such as "./cmd/tool".
	Package string
	// LDFlags are added to "-s -w", such as "-X example.com/m/version.Version=v1.2.3".
	LDFlags string
	// Go is the go command; "" is "go" from PATH.
	Go string
}

// Build compiles the package for platform p into the file out.
func (b GoBuild) Build(ctx context.Context, p v1.Platform, out string) error {
	if p.OS == "" || p.Architecture == "" {
		return fmt.Errorf("go build %s: platform %q has no OS or architecture", b.Package, p)
	}
	goCmd := b.Go
	if goCmd == "" {
		goCmd = "go"
	}
	ldflags := strings.TrimSpace("-s -w " + b.LDFlags)
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-buildvcs=false",
		"-ldflags", ldflags, "-o", out, b.Package)
	cmd.Dir = b.Dir
	cmd.Env = append(os.Environ(), goEnv(p)...)
	var output bytes.Buffer
	cmd.Stdout = &output
	cmd.Stderr = &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", b.Package, p, err, output.String())
	}
	return nil
}

// goEnv is the environment that selects platform p and pins what else changes the output.
func goEnv(p v1.Platform) []string {
	env := []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture,
		"GOAMD64=v1", "GOARM64=v8.0", "GOEXPERIMENT="}
	if p.Architecture == "arm" {
		arm := strings.TrimPrefix(p.Variant, "v")
		if arm == "" {
			arm = "7"
		}
		env = append(env, "GOARM="+arm)
	}
	return env
}

// Platforms parses "os/arch[/variant]" strings such as "linux/amd64" and "linux/arm64".
func Platforms(specs ...string) ([]v1.Platform, error) {
	out := make([]v1.Platform, 0, len(specs))
	for _, s := range specs {
		p, err := v1.ParsePlatform(s)
		if err != nil {
			return nil, err
		}
		if p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("platform %q: want os/arch[/variant]", s)
		}
		out = append(out, *p)
	}
	return out, nil
}
