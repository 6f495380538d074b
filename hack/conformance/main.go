// Command conformance builds the pod images of Kubernetes' External Storage suites for `make
// conformance` (hack/conformance.sh): one OCI image-layout tar per image, for this machine's
// architecture, and the suite's repository list (KUBE_TEST_REPO_LIST) that names them. It
// prints the tars, comma-separated, as its last line.
//
//	go run ./hack/conformance -debs DEBDIR -agnhost BIN/agnhost -out DIR
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

	"github.com/shutter-csi/shutter/internal/imagebuild"
	"github.com/shutter-csi/shutter/test/conformance"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "summary" {
		fail(summary(os.Args[2]))
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "upstream" {
		fail(upstream(os.Args[2:]))
		return
	}
	var o conformance.ImageOptions
	debs := flag.String("debs", "", "folder of the Debian packages the images are made of (missing ones are downloaded with apt-get)")
	flag.StringVar(&o.Agnhost, "agnhost", "", "static agnhost binary (hack/build-tools.sh agnhost)")
	flag.StringVar(&o.Out, "out", "", "folder for the image tars and repo-list.yaml")
	flag.Parse()
	if *debs == "" || o.Agnhost == "" || o.Out == "" {
		fail(fmt.Errorf("-debs, -agnhost and -out are required"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if o.Debs, err = conformance.FetchDebs(ctx, *debs, conformance.Packages()); err != nil {
		fail(err)
	}
	o.BusyboxDeb = o.Debs["busybox-static"]
	if o.Created, err = imagebuild.SourceDateEpoch(); err != nil {
		fail(err)
	}
	tars, err := conformance.BuildImages(ctx, o)
	if err != nil {
		fail(err)
	}
	repoList := filepath.Join(o.Out, "repo-list.yaml")
	if err := os.WriteFile(repoList, []byte(conformance.RepoList()), 0o644); err != nil {
		fail(err)
	}
	for _, img := range conformance.SuiteImages {
		fmt.Fprintf(os.Stderr, "conformance: built %s\n", img.Ref())
	}
	fmt.Println(strings.Join(tars, ","))
}

func summary(junit string) error {
	f, err := os.Open(junit)
	if err != nil {
		return err
	}
	defer f.Close()
	counts, err := conformance.Summarize(f)
	if err != nil {
		return err
	}
	return conformance.WriteSummary(os.Stdout, counts)
}

func upstream(args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ExitOnError)
	debs := fs.String("debs", "", "folder of the Debian packages (missing ones are downloaded with apt-get)")
	var o conformance.UpstreamOptions
	fs.StringVar(&o.BinDir, "bin", "", "folder of the static binaries, named like the images")
	fs.StringVar(&o.Out, "out", "", "folder for the image tars")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *debs == "" || o.BinDir == "" || o.Out == "" {
		return fmt.Errorf("upstream: -debs, -bin and -out are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if o.Debs, err = conformance.FetchDebs(ctx, *debs, conformance.UpstreamPackages()); err != nil {
		return err
	}
	if o.Created, err = imagebuild.SourceDateEpoch(); err != nil {
		return err
	}
	tars, err := conformance.BuildUpstreamImages(ctx, o)
	if err != nil {
		return err
	}
	for _, img := range conformance.UpstreamImages {
		fmt.Fprintf(os.Stderr, "conformance: built %s\n", img.Ref())
	}
	fmt.Println(strings.Join(tars, ","))
	return nil
}

func fail(err error) {
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "conformance: %v\n", err)
	os.Exit(1)
}
