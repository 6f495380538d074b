// Package command is what every long-running Shutter binary does around its package's Run: the
// --version and klog flags, the exit codes, the context that ends on SIGINT or SIGTERM and the
// start and failure log lines. A cmd/ main is then its flags, an Options struct and one call:
//
//	func main() { command.Main("name", parseFlags, pkg.Run) }
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/version"
)

// Exit codes of a command.
const (
	ExitOK    = 0 // ran and stopped cleanly, or answered --help or --version
	ExitError = 1 // Run failed
	ExitUsage = 2 // the command line was refused
)

// ParseFunc turns a command's arguments into its options, or reports that --version was asked
// for (then the options need not be complete). flag.ErrHelp means --help was answered.
type ParseFunc[O any] func(args []string) (opts O, showVersion bool, err error)

// RunFunc runs a command until ctx ends or it fails.
type RunFunc[O any] func(ctx context.Context, opts O) error

// Main runs the command called name with the process's arguments and exits with its exit code.
func Main[O any](name string, parse ParseFunc[O], run RunFunc[O]) {
	code := Execute(name, os.Args[1:], os.Stdout, os.Stderr, parse, run)
	klog.FlushAndExit(klog.ExitFlushTimeout, code)
}

// Execute is Main without the exit: parse the arguments (a refused command line is reported on
// stderr with ExitUsage; --version prints the name and version on stdout), then call run with a
// context that carries a logger named name and ends on SIGINT or SIGTERM. It returns the exit code.
func Execute[O any](name string, args []string, stdout, stderr io.Writer, parse ParseFunc[O], run RunFunc[O]) int {
	opts, showVersion, err := parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
		return ExitUsage
	case showVersion:
		fmt.Fprintln(stdout, name, version.String())
		return ExitOK
	}
	if err := applyPending(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName(name)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting", "version", version.Version, "commit", version.Commit)
	if err := run(ctx, opts); err != nil {
		logger.Error(err, "Exiting")
		return ExitError
	}
	return ExitOK
}

// ParseDropIn is Parse for a drop-in replacement of an upstream image: instead of klog's flags
// it adds d's (component-base logging, --feature-gates, --automaxprocs and the removed flags)
// and completes d after parsing; Execute applies d's logging configuration.
func ParseDropIn(fs *flag.FlagSet, args []string, d *DropIn) (showVersion bool, err error) {
	v := fs.Bool("version", false, "Print the version and exit.")
	d.AddFlags(fs)
	return finish(fs, args, v, d.Complete)
}

// Parse adds --version and klog's flags to fs, parses args and refuses positional arguments. When
// --version is given it reports so and checks nothing else, so that --version works whatever
// the other flags say. fs should be made with flag.ContinueOnError.
func Parse(fs *flag.FlagSet, args []string) (showVersion bool, err error) {
	v := fs.Bool("version", false, "Print the version and exit.")
	klog.InitFlags(fs)
	return finish(fs, args, v, nil)
}

// finish parses args into fs, answers --version and refuses positional arguments; then it calls
// complete, when given.
func finish(fs *flag.FlagSet, args []string, version *bool, complete func() error) (bool, error) {
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if *version {
		return true, nil
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if complete != nil {
		return false, complete()
	}
	return false, nil
}
