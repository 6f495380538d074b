// Command kubectl-shutter is the `kubectl shutter` plugin: it explains why a volume snapshot is
// not ready or not deleted, and lists the changed blocks of snapshots (changed-blocks). Put it on
// the PATH and run `kubectl shutter --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/pflag"

	"github.com/shutter-csi/shutter/pkg/changedblocks"
	"github.com/shutter-csi/shutter/pkg/diagnose"
	"github.com/shutter-csi/shutter/pkg/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "changed-blocks" {
		changedBlocks(os.Args[2:])
		return
	}
	opts := diagnose.Options{Out: os.Stdout, Err: os.Stderr}
	fs := pflag.NewFlagSet("kubectl-shutter", pflag.ContinueOnError)
	opts.AddFlags(fs)
	showVersion := fs.Bool("version", false, "Print the version and exit.")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, diagnose.Usage)
		fs.PrintDefaults()
	}
	err := fs.Parse(os.Args[1:])
	switch {
	case errors.Is(err, pflag.ErrHelp):
		os.Exit(diagnose.ExitOK)
	case err != nil:
		fmt.Fprintf(os.Stderr, "kubectl shutter: %v\n", err)
		os.Exit(diagnose.ExitError)
	case *showVersion:
		fmt.Println("kubectl-shutter", version.Version)
		return
	}
	opts.Args = fs.Args()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := diagnose.Run(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "kubectl shutter: %v\n", err)
		os.Exit(diagnose.ExitError)
	}
}

// changedBlocks runs `kubectl shutter changed-blocks`.
func changedBlocks(args []string) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := changedblocks.Run(ctx, args, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, pflag.ErrHelp):
	case err != nil:
		fmt.Fprintf(os.Stderr, "kubectl shutter changed-blocks: %v\n", err)
		stop()
		os.Exit(diagnose.ExitError)
	}
}
