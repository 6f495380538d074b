// Command snapshot-controller is the cluster's one snapshot controller: it binds VolumeSnapshots
// to VolumeSnapshotContents, creates contents for dynamic snapshots and runs deletion and
// finalizers. CSI drivers' csi-snapshotter sidecars do the backend work.
package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"time"

	"github.com/shutter-csi/shutter/pkg/app"
	"github.com/shutter-csi/shutter/pkg/command"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/snapshot"
)

func main() {
	command.Main(snapshot.Name, parseFlags, func(ctx context.Context, opts snapshot.RunOptions) error {
		app.TuneRuntime(opts.HTTP.Profiling)
		app.PreferListResponses()
		return snapshot.Run(ctx, opts)
	})
}

// parseFlags turns the command line into controller options, or reports that --version was
// asked for.
func parseFlags(args []string) (snapshot.RunOptions, bool, error) {
	var opts snapshot.RunOptions
	fs := flag.NewFlagSet(snapshot.Name, flag.ContinueOnError)
	// Client-side limits sized so that hundreds of snapshots created at once are not throttled;
	// API Priority and Fairness protects the server. See the README.
	opts.Client.AddFlags(fs, 100, 200)
	opts.LeaderElection.AddFlags(fs)
	opts.HTTP.AddFlags(fs, "Address (host:port) serving /metrics, /healthz and /healthz/leader-election; empty serves nothing.")
	opts.HTTP.AddMetricsFlags(fs)
	fs.DurationVar(&opts.RetryCRDIntervalMax, "retry-crd-interval-max", 30*time.Second, "Longest wait between checks for the snapshot CRDs at start; past it the controller exits.")
	fs.IntVar(&opts.Controller.Workers, "worker-threads", 10, "Workers per queue.")
	fs.DurationVar(&opts.Controller.Retry.RetryStart, "retry-interval-start", time.Second, "First retry delay of a failed object; doubles on each failure.")
	fs.DurationVar(&opts.Controller.Retry.RetryMax, "retry-interval-max", 5*time.Minute, "Longest retry delay of a failed object.")
	fs.DurationVar(&opts.Controller.Retry.SyncTimeout, "sync-timeout", controller.DefaultSyncTimeout, "Deadline of each sync of an object: a sync still waiting on an API call then is ended and retried, so that one call that hangs cannot hold a worker; 0 sets no deadline.")
	fs.DurationVar(&opts.Controller.ResyncPeriod, "resync-period", 15*time.Minute, "How often every object is looked at again as a safety net; 0 disables it.")
	fs.BoolVar(&opts.Controller.DistributedSnapshotting, "enable-distributed-snapshotting", false, "Label each content with the node of its volume, for node-local sidecars.")
	fs.BoolVar(&opts.Controller.ReadyEvents, "ready-events", false, "Record a Normal event when a snapshot or group snapshot becomes ready (status.readyToUse says the same; each event is an API write). Failures always get a Warning event.")
	fs.DurationVar(&opts.Controller.SidecarLivenessThreshold, "sidecar-liveness-threshold", 5*time.Minute, "A snapshot whose content has waited this long for its driver's csi-snapshotter gets a Warning event when no sidecar of the driver holds a live leader-election Lease (watches the Leases of every namespace but kube-node-lease, and counts those of kube-system, of --sidecar-lease-namespaces and of the namespaces whose ServiceAccounts a ClusterRoleBinding lets write VolumeSnapshotContents); 0 turns the check off.")
	fs.Func("sidecar-lease-namespaces", "Comma-separated namespaces whose csi-snapshotter Leases count for --sidecar-liveness-threshold besides kube-system and the namespaces found from RBAC (name them when the controller may not list clusterroles and clusterrolebindings).", func(v string) error {
		for _, ns := range strings.Split(v, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				opts.Controller.SidecarLeaseNamespaces = append(opts.Controller.SidecarLeaseNamespaces, ns)
			}
		}
		return nil
	})
	fs.BoolVar(&opts.Controller.PreventVolumeModeConversion, "prevent-volume-mode-conversion", true, "Record each content's source volume mode so that restores cannot change it unnoticed.")
	fs.BoolVar(&opts.Controller.Schedules, "snapshot-schedules", true, "Take and prune snapshots for SnapshotSchedules (snapshot.shutter.dev) once their CRD is served.")
	dropIn := command.NewDropIn()
	if showVersion, err := command.ParseDropIn(fs, args, dropIn); showVersion || err != nil {
		return opts, showVersion, err
	}
	if opts.Controller.Retry.SyncTimeout < 0 {
		return opts, false, errors.New("--sync-timeout cannot be negative")
	}
	opts.Controller.Groups = dropIn.Enabled(command.GateGroupSnapshots)
	return opts, false, opts.HTTP.Complete()
}
