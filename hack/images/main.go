// Command images builds Shutter's container images without a container engine (`make images`):
// for each component a static binary per platform, an OCI image index of both platforms, written
// to <out>/<component>.tar as an OCI image layout that `ctr images import` and
// `kind load image-archive` accept, and with -push pushed to a registry. See
// docs/images.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shutter-csi/shutter/internal/imagebuild"
	"github.com/shutter-csi/shutter/internal/images"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run() error {
	opts, out, push, err := parseFlags(os.Args[1:])
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	fmt.Printf("images: version %s, commit %s, created %s, platforms %v\n",
		opts.Version, opts.Commit, opts.Created.Format(time.RFC3339), opts.Platforms)
	results, err := images.Build(ctx, opts)
	if err != nil {
		return err
	}
	if err := images.WriteTars(out, results, os.Stdout); err != nil {
		return err
	}
	if push != "" {
		pushed, err := images.Push(ctx, push, results, os.Stdout)
		if err != nil {
			return err
		}
		for _, p := range pushed {
			fmt.Printf("pushed %s@%s\n", p.Ref, p.Digest)
		}
	}
	fmt.Printf("images: done in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// parseFlags returns the build's options, the output folder and the push prefix.
func parseFlags(args []string) (opts images.Options, out, push string, err error) {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	fs.StringVar(&opts.Version, "version", "", "image tag and org.opencontainers.image.version (the Makefile's VERSION)")
	fs.StringVar(&opts.Commit, "commit", "", "org.opencontainers.image.revision (the Makefile's COMMIT)")
	fs.StringVar(&opts.LDFlags, "ldflags", "", "linker flags stamping the binaries (the Makefile's LDFLAGS)")
	fs.StringVar(&opts.Registry, "registry", images.DefaultRegistry, "registry prefix of the image names in the tars (the chart's global.imageRegistry)")
	fs.StringVar(&opts.CACertificates, "ca-certificates", "", "PEM CA bundle to put into the API clients' images; none by default (in a cluster they trust the API server through their ServiceAccount's CA, with --kubeconfig through its CA), so no image depends on the build machine's bundle")
	platforms := fs.String("platforms", strings.Join(images.DefaultPlatforms, ","), "comma-separated os/arch list")
	only := fs.String("only", "", "comma-separated components to build (default: all)")
	fs.StringVar(&out, "out", "bin/images", "folder of the <component>.tar files (binaries are kept in its .build folder)")
	fs.StringVar(&push, "push", "", "registry prefix to push the indexes to, such as registry.example/team (credentials from the docker config)")
	if err = fs.Parse(args); err != nil {
		return
	}
	if opts.Platforms, err = imagebuild.Platforms(strings.Split(*platforms, ",")...); err != nil {
		return
	}
	if *only != "" {
		opts.Only = strings.Split(*only, ",")
	}
	if opts.Created, err = imagebuild.SourceDateEpoch(); err != nil {
		return
	}
	if opts.CACertificates != "" {
		if _, err = os.Stat(opts.CACertificates); err != nil {
			return opts, out, push, fmt.Errorf("-ca-certificates: %w", err)
		}
	}
	opts.BuildDir = filepath.Join(out, ".build")
	opts.Log = os.Stdout
	return opts, out, push, nil
}
