// Command csi-snapshotter is the sidecar that runs next to a CSI driver and turns the driver's
// VolumeSnapshotContents and VolumeGroupSnapshotContents into CSI snapshot calls.
package main

import (
	"context"
	"errors"
	"flag"
	"os"

	"github.com/shutter-csi/shutter/pkg/app"
	"github.com/shutter-csi/shutter/pkg/command"
	"github.com/shutter-csi/shutter/pkg/sidecar"
)

func main() {
	command.Main("csi-snapshotter", parseFlags, func(ctx context.Context, opts sidecar.Options) error {
		app.TuneRuntime(opts.HTTP.Profiling)
		app.PreferListResponses()
		return sidecar.Run(ctx, opts)
	})
}

// parseFlags turns the command line into sidecar options.
func parseFlags(args []string) (sidecar.Options, bool, error) {
	opts := sidecar.DefaultOptions()
	fs := flag.NewFlagSet("csi-snapshotter", flag.ContinueOnError)
	fs.StringVar(&opts.CSIAddress, "csi-address", opts.CSIAddress, "Unix socket of the CSI driver.")
	fs.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "Timeout of every CSI call.")
	fs.StringVar(&opts.SnapshotNamePrefix, "snapshot-name-prefix", opts.SnapshotNamePrefix, "Prefix of the names sent in CreateSnapshot.")
	fs.IntVar(&opts.SnapshotNameUUIDLength, "snapshot-name-uuid-length", opts.SnapshotNameUUIDLength, "Keep only this many characters of the snapshot UID (dashes removed) in CreateSnapshot names; -1 keeps the UID whole.")
	fs.StringVar(&opts.GroupSnapshotNamePrefix, "groupsnapshot-name-prefix", opts.GroupSnapshotNamePrefix, "Prefix of the names sent in CreateVolumeGroupSnapshot.")
	fs.IntVar(&opts.GroupSnapshotNameUUIDLength, "groupsnapshot-name-uuid-length", opts.GroupSnapshotNameUUIDLength, "As --snapshot-name-uuid-length, for group snapshots.")
	fs.BoolVar(&opts.ExtraCreateMetadata, "extra-create-metadata", false, "Add the snapshot's and content's names to the parameters of create calls.")
	nodeDeployment := fs.Bool("node-deployment", false, "Run on every node and handle only the contents labelled managed-by this node ($NODE_NAME).")
	fs.IntVar(&opts.Workers, "worker-threads", opts.Workers, "Number of workers per reconciled kind.")
	fs.DurationVar(&opts.RetryIntervalStart, "retry-interval-start", opts.RetryIntervalStart, "First retry delay after a failure; doubles per retry.")
	fs.DurationVar(&opts.RetryIntervalMax, "retry-interval-max", opts.RetryIntervalMax, "Longest retry delay.")
	fs.DurationVar(&opts.SyncTimeout, "sync-timeout", opts.SyncTimeout, "Deadline of each sync of a content (its CSI call and the writes after it): a sync still waiting then is ended and retried, so that one call that hangs cannot hold a worker; at least twice --timeout (a shorter one is raised, with a warning); 0 sets no deadline.")
	fs.DurationVar(&opts.ResyncPeriod, "resync-period", opts.ResyncPeriod, "How often every object is looked at again; 0 disables.")
	opts.HTTP.AddFlags(fs, "Address serving /metrics and /healthz/leader-election, e.g. :8080; empty serves nothing.")
	opts.HTTP.AddMetricsFlags(fs)
	opts.Client.AddFlags(fs, opts.Client.QPS, opts.Client.Burst)
	opts.LeaderElection.AddFlags(fs)
	dropIn := command.NewDropIn()
	if showVersion, err := command.ParseDropIn(fs, args, dropIn); showVersion || err != nil {
		return opts, showVersion, err
	}
	opts.Groups = dropIn.Enabled(command.GateGroupSnapshots)
	if err := opts.HTTP.Complete(); err != nil {
		return opts, false, err
	}
	if *nodeDeployment {
		if opts.NodeName = os.Getenv("NODE_NAME"); opts.NodeName == "" {
			return opts, false, errors.New("--node-deployment needs the NODE_NAME environment variable")
		}
		if opts.LeaderElection.Enabled {
			return opts, false, errors.New("--node-deployment and --leader-election exclude each other")
		}
	}
	if opts.SnapshotNamePrefix == "" || opts.GroupSnapshotNamePrefix == "" {
		return opts, false, errors.New("--snapshot-name-prefix and --groupsnapshot-name-prefix cannot be empty")
	}
	if opts.Workers <= 0 || opts.Timeout <= 0 || opts.RetryIntervalStart <= 0 || opts.RetryIntervalMax < opts.RetryIntervalStart {
		return opts, false, errors.New("--worker-threads and --timeout must be positive, and --retry-interval-max at least --retry-interval-start")
	}
	if opts.SyncTimeout < 0 {
		return opts, false, errors.New("--sync-timeout cannot be negative")
	}
	return opts, false, nil
}
