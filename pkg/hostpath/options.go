package hostpath

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/shutter-csi/shutter/pkg/hostpath/mounter"
	"github.com/shutter-csi/shutter/pkg/version"
)

// DefaultDriverName is the CSI driver name used when none is configured.
const DefaultDriverName = "hostpath.csi.shutter.dev"

// Options configures the hostpath driver. Build it with DefaultOptions and
// override fields; Validate reports the first unusable value.
type Options struct {
	// Endpoint is the Unix socket to serve CSI on, as unix:///path or a path.
	Endpoint string
	// SocketGroup, when not negative, owns the socket (mode 0660), so that
	// sidecars running as that group, not as root, can connect.
	SocketGroup int
	// NodeID identifies this node; volumes are attached and published here.
	NodeID string
	// DriverName is reported by GetPluginInfo.
	DriverName string
	// Version is reported by GetPluginInfo (vendor_version); by default the build's version.
	Version string
	// DataDir holds volume data, snapshot data and the state records.
	DataDir string
	// Capacity is the total number of bytes all volumes may provision.
	Capacity int64
	// MaxVolumeSize is the largest single volume, in bytes.
	MaxVolumeSize int64
	// EnableTopology reports the node's topology segment and honours
	// accessibility requirements.
	EnableTopology bool
	// EnableAttach offers ControllerPublish/Unpublish.
	EnableAttach bool
	// MaxVolumesPerNode limits attached (with EnableAttach) or published
	// volumes per node; 0 means no limit.
	MaxVolumesPerNode int64
	// EnableSnapshotMetadata serves the CSI SnapshotMetadata service.
	EnableSnapshotMetadata bool
	// SnapshotMetadataBlockType is how that service answers: VARIABLE_LENGTH (extents; the
	// default when empty) or FIXED_LENGTH (blocks of MetadataBlockSize bytes).
	SnapshotMetadataBlockType string
	// MutableParameters lists the parameter keys ControllerModifyVolume and
	// CreateVolume's mutable_parameters accept.
	MutableParameters []string
	// Sync flushes data and state with fsync before an operation is
	// reported done. Without it, state is still replaced atomically (safe
	// against a process crash) but may be lost on power failure.
	Sync bool
	// BackgroundRestoreSync lets CreateVolume from a snapshot return once
	// the copy is complete but before the restored data is flushed, when
	// Sync is on. The volume stays marked pending until a background flush
	// completes: NodeStage and NodePublish wait for it, and after a power
	// failure the volume is copied from its snapshot again, so no torn data
	// is ever served (restore.go).
	BackgroundRestoreSync bool
	// GroupSnapshotQuiesce freezes the cgroups of the pods the driver
	// published a group snapshot's member volumes to while the members are
	// copied, so that the members show one instant even while workloads
	// write (quiesce.go). Off by default.
	GroupSnapshotQuiesce bool
	// GroupSnapshotQuiesceTimeout bounds how long those pods stay frozen;
	// a copy that takes longer fails and is retried, and fails for good
	// after three timeouts in a row.
	GroupSnapshotQuiesceTimeout time.Duration
	// HTTPEndpoint is the TCP address /metrics is served on; empty serves
	// nothing.
	HTTPEndpoint string
	// CgroupRoot is where the node's cgroup filesystem is mounted: the
	// unified hierarchy, or the folder holding the v1 hierarchies.
	CgroupRoot string
	// KubeletRegistrationPath, when set, is the path of the CSI socket
	// as kubelet sees it (a host path); the driver then registers itself
	// with kubelet on RegistrationSocket (package registration).
	KubeletRegistrationPath string
	// VolumeBacking says how new filesystem volumes keep their data:
	// BackingFolder, a folder of the data directory's filesystem that may
	// grow until that filesystem is full, or BackingImage, an ext4
	// filesystem of the volume's size in a sparse image file, mounted
	// through a loop device, which a volume cannot outgrow (volimage.go).
	// Volumes keep the backing they were made with.
	VolumeBacking string
	// RegistrationSocket is where the kubelet registration service is
	// served: a socket in kubelet's plugins_registry folder; "" is
	// /registration/<DriverName>-reg.sock.
	RegistrationSocket string
	// QuarantineMaxAge, when positive, deletes quarantined data (data
	// no record accounted for at a start, quarantine.go) once nothing was
	// moved into its start's folder for that long. 0 keeps it until an
	// operator deletes it.
	QuarantineMaxAge time.Duration
	// Mounter makes the node service's mounts and loop devices; nil is the
	// kernel's. Tests give hostpathtest.FakeMounter.
	Mounter mounter.Interface
}

// DefaultOptions returns the defaults the command line starts from.
func DefaultOptions() Options {
	return Options{
		Endpoint:          "unix:///csi/csi.sock",
		SocketGroup:       -1,
		DriverName:        DefaultDriverName,
		Version:           version.Version,
		DataDir:           "/var/lib/csi-hostpath-data",
		Capacity:          100 << 30,
		MaxVolumeSize:     1 << 40,
		MaxVolumesPerNode: 0,
		MutableParameters: []string{"iops", "throughput"},
		Sync:              true,

		BackgroundRestoreSync: true,

		GroupSnapshotQuiesce:        false,
		GroupSnapshotQuiesceTimeout: 5 * time.Second,
		CgroupRoot:                  "/sys/fs/cgroup",

		VolumeBacking: BackingFolder,
	}
}

// Values of Options.VolumeBacking.
const (
	BackingFolder = "folder"
	BackingImage  = "image"
)

// Validate checks the options and returns the first problem found.
func (o Options) Validate() error {
	var errs []error
	if _, err := socketPath(o.Endpoint); err != nil {
		errs = append(errs, err)
	}
	if err := checkID("--nodeid", o.NodeID); err != nil {
		errs = append(errs, fmt.Errorf("--nodeid %q: must be 1-%d letters, digits, '.', '_' or '-'", o.NodeID, maxIDLength))
	}
	if o.DriverName == "" || len(o.DriverName) > 63 {
		errs = append(errs, errors.New("--drivername must be 1-63 characters"))
	}
	if o.DataDir == "" || !filepath.IsAbs(o.DataDir) {
		errs = append(errs, fmt.Errorf("--datadir %q must be an absolute path", o.DataDir))
	}
	if o.Capacity <= 0 {
		errs = append(errs, errors.New("--capacity must be positive"))
	}
	if o.MaxVolumeSize <= 0 {
		errs = append(errs, errors.New("--max-volume-size must be positive"))
	}
	if o.MaxVolumesPerNode < 0 {
		errs = append(errs, errors.New("--max-volumes-per-node must not be negative"))
	}
	if o.QuarantineMaxAge < 0 {
		errs = append(errs, errors.New("--quarantine-max-age must not be negative"))
	}
	if o.GroupSnapshotQuiesceTimeout <= 0 {
		errs = append(errs, errors.New("--group-snapshot-quiesce-timeout must be positive"))
	}
	if err := checkBlockType(o.SnapshotMetadataBlockType); err != nil {
		errs = append(errs, err)
	}
	if o.VolumeBacking != BackingFolder && o.VolumeBacking != BackingImage {
		errs = append(errs, fmt.Errorf("--volume-backing %q: want %s or %s", o.VolumeBacking, BackingFolder, BackingImage))
	}
	if o.KubeletRegistrationPath != "" && !filepath.IsAbs(o.KubeletRegistrationPath) {
		errs = append(errs, fmt.Errorf("--kubelet-registration-path %q must be an absolute path", o.KubeletRegistrationPath))
	}
	if o.RegistrationSocket != "" && !filepath.IsAbs(o.RegistrationSocket) {
		errs = append(errs, fmt.Errorf("--registration-socket %q must be an absolute path", o.RegistrationSocket))
	}
	return errors.Join(errs...)
}

// registrationSocket is where the kubelet registration service is served.
func (o Options) registrationSocket() string {
	if o.RegistrationSocket != "" {
		return o.RegistrationSocket
	}
	return filepath.Join("/registration", o.DriverName+"-reg.sock")
}

// socketPath turns an endpoint (unix:///path, unix:/path or /path) into the
// socket's file path.
func socketPath(endpoint string) (string, error) {
	path := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		path = rest
	} else if rest, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		path = rest
	} else if strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("--endpoint %q: only unix:// endpoints are supported", endpoint)
	}
	if path == "" || !filepath.IsAbs(path) {
		return "", fmt.Errorf("--endpoint %q: want unix:///absolute/path", endpoint)
	}
	return path, nil
}
