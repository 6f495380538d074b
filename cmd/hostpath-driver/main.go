// Command hostpath-driver is Shutter's CSI driver that keeps volumes and
// snapshots in a local directory. It serves the CSI Identity, Controller,
// Node and GroupController services (and SnapshotMetadata when enabled) on
// a Unix socket.
package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/shutter-csi/shutter/pkg/command"
	"github.com/shutter-csi/shutter/pkg/hostpath"
)

func main() {
	command.Main("hostpath-driver", parseFlags, hostpath.Run)
}

// parseFlags turns the command line into validated driver options, or reports that --version
// was asked for.
func parseFlags(args []string) (hostpath.Options, bool, error) {
	opts := hostpath.DefaultOptions()
	fs := flag.NewFlagSet("hostpath-driver", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: hostpath-driver [flags]\n\n"+
			"Serves the Shutter hostpath CSI driver on a Unix socket. Volumes, snapshots\n"+
			"and their state live under --datadir.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&opts.Endpoint, "endpoint", opts.Endpoint, "CSI endpoint to serve, unix:///path/to/csi.sock")
	fs.IntVar(&opts.SocketGroup, "socket-group", opts.SocketGroup, "group ID that owns the CSI socket (mode 0660), so non-root sidecars of that group can connect; -1 leaves it to the driver's user")
	fs.StringVar(&opts.NodeID, "nodeid", opts.NodeID, "ID of this node (required): letters, digits, '.', '_' or '-'")
	fs.StringVar(&opts.DriverName, "drivername", opts.DriverName, "CSI driver name reported by GetPluginInfo")
	fs.StringVar(&opts.DataDir, "datadir", opts.DataDir, "absolute directory holding volume data, snapshot data and state")
	fs.Int64Var(&opts.Capacity, "capacity", opts.Capacity, "total bytes all volumes together may provision")
	fs.Int64Var(&opts.MaxVolumeSize, "max-volume-size", opts.MaxVolumeSize, "largest single volume in bytes")
	fs.BoolVar(&opts.EnableTopology, "enable-topology", opts.EnableTopology, "report the node's topology segment and honour accessibility requirements")
	fs.BoolVar(&opts.EnableAttach, "enable-attach", opts.EnableAttach, "offer ControllerPublishVolume/ControllerUnpublishVolume")
	fs.Int64Var(&opts.MaxVolumesPerNode, "max-volumes-per-node", opts.MaxVolumesPerNode, "attach limit reported by NodeGetInfo and enforced by ControllerPublishVolume; 0 = none")
	fs.BoolVar(&opts.EnableSnapshotMetadata, "enable-snapshot-metadata", opts.EnableSnapshotMetadata, "serve the CSI SnapshotMetadata service (allocated and changed blocks of block snapshots)")
	fs.StringVar(&opts.SnapshotMetadataBlockType, "snapshot-metadata-block-type", "VARIABLE_LENGTH", "how the SnapshotMetadata service reports ranges: VARIABLE_LENGTH (extents) or FIXED_LENGTH (4 KiB blocks)")
	mutable := fs.String("mutable-parameters", strings.Join(opts.MutableParameters, ","), "comma-separated parameter keys ControllerModifyVolume accepts")
	fs.BoolVar(&opts.Sync, "fsync", opts.Sync, "flush data and state to disk before acknowledging; false keeps state atomic but not power-loss safe")
	fs.BoolVar(&opts.BackgroundRestoreSync, "background-restore-sync", opts.BackgroundRestoreSync,
		"with --fsync, let CreateVolume from a snapshot return once the copy is complete (written to the device, or in the page cache where\n"+
			"direct I/O is refused) and flush it in the background; the volume is recorded as pending until then: NodeStage/NodePublish wait\n"+
			"for the flush, a killed driver flushes a finished copy again at start and otherwise, as after a power failure, copies it from its\n"+
			"snapshot again, so torn data is never served. false flushes before returning")
	fs.BoolVar(&opts.GroupSnapshotQuiesce, "group-snapshot-quiesce", opts.GroupSnapshotQuiesce,
		"freeze the pods a group snapshot's volumes are published to (read-write) while the volumes are copied, so that the\n"+
			"members show one instant even while workloads write: the pods' UIDs come from the driver's publish targets, their\n"+
			"cgroups are frozen (cgroup v2 cgroup.freeze or the v1 freezer) below --cgroup-root. Needs root")
	fs.DurationVar(&opts.GroupSnapshotQuiesceTimeout, "group-snapshot-quiesce-timeout", opts.GroupSnapshotQuiesceTimeout,
		"longest time pods stay frozen for one group snapshot; a copy that takes longer thaws them and fails with Unavailable,\n"+
			"and after three such timeouts in a row with FailedPrecondition, for good")
	fs.StringVar(&opts.CgroupRoot, "cgroup-root", opts.CgroupRoot, "where the node's cgroup filesystem is mounted (the unified hierarchy, or the folder of the v1 hierarchies)")
	fs.StringVar(&opts.VolumeBacking, "volume-backing", opts.VolumeBacking,
		"how new filesystem volumes keep their data: folder (a folder of --datadir's filesystem, which can grow until that\n"+
			"filesystem is full) or image (an ext4 filesystem of the volume's size in a sparse file below --datadir, mounted\n"+
			"through a loop device: a volume cannot outgrow its size; needs root and loop devices). Volumes keep the backing\n"+
			"they were made with")
	fs.DurationVar(&opts.QuarantineMaxAge, "quarantine-max-age", opts.QuarantineMaxAge,
		"delete data the driver moved to quarantine (found at a start with no record, <datadir>/quarantine) once nothing was\n"+
			"moved into its start's folder for this long; 0 keeps it until deleted by hand. Quarantined data counts against --capacity")
	fs.StringVar(&opts.HTTPEndpoint, "http-endpoint", opts.HTTPEndpoint, "TCP address to serve /metrics on, e.g. :8080; empty serves nothing")
	fs.StringVar(&opts.KubeletRegistrationPath, "kubelet-registration-path", opts.KubeletRegistrationPath,
		"register with kubelet, giving it this path of the CSI socket as kubelet sees it (a host path such as\n"+
			"/var/lib/kubelet/plugins/<driver>/csi.sock); replaces the node-driver-registrar container. Empty: do not register")
	fs.StringVar(&opts.RegistrationSocket, "registration-socket", opts.RegistrationSocket,
		"with --kubelet-registration-path, the socket to serve kubelet's plugin registration on, in kubelet's plugins_registry\n"+
			"folder (default /registration/<drivername>-reg.sock)")
	if showVersion, err := command.Parse(fs, args); showVersion || err != nil {
		return opts, showVersion, err
	}
	opts.MutableParameters = splitList(*mutable)
	return opts, false, opts.Validate()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
