package command

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr/funcr"
	_ "k8s.io/apiserver/pkg/features" // registers the generic gates upstream's --feature-gates knows
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	metricsfeatures "k8s.io/component-base/metrics/features"
	"k8s.io/klog/v2"
)

// Feature gates of the upstream snapshot-controller and csi-snapshotter (external-snapshotter
// v8.7.0 pkg/features), with the same names and specs.
const (
	// GateGroupSnapshots turns VolumeGroupSnapshots on (GA and on by default upstream since v8.7).
	GateGroupSnapshots featuregate.Feature = "CSIVolumeGroupSnapshot"
	// GateReleaseLeaderElectionOnExit hands the Lease back on SIGTERM; Shutter always does.
	GateReleaseLeaderElectionOnExit featuregate.Feature = "ReleaseLeaderElectionOnExit"
)

var upstreamGates = map[featuregate.Feature]featuregate.FeatureSpec{
	GateGroupSnapshots:              {Default: true, PreRelease: featuregate.GA},
	GateReleaseLeaderElectionOnExit: {Default: false, PreRelease: featuregate.Alpha},
}

// Flags upstream removed and deployments still pass. Each is accepted with one warning; klog's
// own flags keep klog's meaning, --enable-volume-group-snapshots sets GateGroupSnapshots, the
// rest are ignored as upstream ignored them before removing them.
var (
	// klogFlags were removed in v8.3 (component-base logging, KEP-2845). Registered by klog with
	// underscores; deployments spell them with dashes too.
	klogFlags = []string{"logtostderr", "alsologtostderr", "log_dir", "log_file", "log_file_max_size",
		"one_output", "skip_headers", "skip_log_headers", "stderrthreshold", "add_dir_header", "log_backtrace_at"}
	// ignoredFlags had no effect long before their removal (v1.1: --connection-timeout and
	// --snapshotter; v2: --leader-election-type).
	ignoredFlags = map[string]bool{"connection-timeout": false, "snapshotter": false, "leader-election-type": false}
)

// Removed flag names, as the deprecation warning names them.
const groupsFlag = "enable-volume-group-snapshots"

// DropIn is the part of a command line that Shutter's snapshot-controller and csi-snapshotter
// share with the upstream images of the same name: component-base's logging flags (including
// --logging-format=json), --feature-gates with upstream's gates, --automaxprocs, and the flags
// upstream removed but deployments still pass. Make one with NewDropIn, register it on the
// command's flag set with AddFlags and check it with Complete after parsing.
type DropIn struct {
	// Gates holds the parsed --feature-gates.
	Gates featuregate.MutableVersionedFeatureGate

	logging   *logsapi.LoggingConfiguration
	logGates  featuregate.MutableVersionedFeatureGate
	gateFlags map[string]bool
	// deprecated records the removed flags the command line used, in order, each once.
	deprecated []string
	// notes are what setting the gates reported, logged once logging is set up.
	notes []string
	// groups is the value of --enable-volume-group-snapshots, nil when not given.
	groups *bool
}

// NewDropIn returns the flags with upstream's defaults.
func NewDropIn() *DropIn {
	gates := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	if err := gates.Add(upstreamGates); err != nil {
		panic(err) // a programming error: the specs above are constant
	}
	// Upstream's binaries also know component-base's metrics gates (k8s.io/apiserver/pkg/server
	// adds them); accepted here, with no effect on Shutter's Prometheus client.
	if err := metricsfeatures.AddFeatureGates(gates); err != nil {
		panic(err)
	}
	logGates := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(logGates); err != nil {
		panic(err)
	}
	return &DropIn{Gates: gates, logging: logsapi.NewLoggingConfiguration(), logGates: logGates, gateFlags: map[string]bool{}}
}

// AddFlags registers the flags on fs.
func (d *DropIn) AddFlags(fs *flag.FlagSet) {
	logsapi.AddGoFlags(d.logging, fs)
	fs.Var(cliflag.NewMapStringBool(&d.gateFlags), "feature-gates", "Comma-separated list of key=value pairs that describe feature gates. Options are:\n"+
		strings.Join(d.Gates.KnownFeatures(), "\n"))
	fs.BoolFunc("automaxprocs", "Accepted for compatibility: Go's runtime sets GOMAXPROCS from the container's CPU quota by itself.", func(v string) error {
		if v == "" {
			return nil
		}
		_, err := strconv.ParseBool(v)
		return err
	})
	klogFS := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFS)
	for _, name := range klogFlags {
		target := klogFS.Lookup(name)
		for _, spelling := range spellings(name) {
			fs.Var(&removedFlag{d: d, name: spelling, target: target.Value}, spelling,
				"DEPRECATED (removed upstream in v8.3): klog's flag, still applied to the text log format.")
		}
	}
	fs.Var(&removedFlag{d: d, name: groupsFlag, target: boolSink{&d.groups}}, groupsFlag,
		"DEPRECATED (removed upstream in v8.2): same as --feature-gates=CSIVolumeGroupSnapshot=<value>.")
	for name, isBool := range ignoredFlags {
		fs.Var(&removedFlag{d: d, name: name, target: ignored{isBool: isBool}}, name, "DEPRECATED: has no effect.")
	}
}

// spellings are a klog flag's names: as klog registers it and with dashes.
func spellings(name string) []string {
	if dashed := strings.ReplaceAll(name, "_", "-"); dashed != name {
		return []string{name, dashed}
	}
	return []string{name}
}

// Complete applies --feature-gates and --enable-volume-group-snapshots to Gates and validates
// the logging flags. An unknown gate is an error, as upstream.
func (d *DropIn) Complete() error {
	// The logging flags are applied only once the command line is accepted: what setting the
	// gates reports is kept and logged then, in the chosen format.
	if err := d.setGates(d.gateFlags); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	if d.groups != nil {
		if err := d.setGates(map[string]bool{string(GateGroupSnapshots): *d.groups}); err != nil {
			return err
		}
	}
	if errs := logsapi.Validate(d.logging, d.logGates, nil); len(errs) > 0 {
		return fmt.Errorf("logging flags: %w", errs.ToAggregate())
	}
	pendingMu.Lock()
	defer pendingMu.Unlock()
	pending = d
	return nil
}

// setGates sets the gates in m, keeping what the feature gate reports in d.notes.
func (d *DropIn) setGates(m map[string]bool) error {
	withLogger, ok := d.Gates.(interface {
		SetFromMapWithLogger(klog.Logger, map[string]bool) error
	})
	if !ok {
		return d.Gates.SetFromMap(m)
	}
	keep := funcr.New(func(_, args string) { d.notes = append(d.notes, args) }, funcr.Options{})
	return withLogger.SetFromMapWithLogger(keep, m)
}

// Enabled tells whether gate is on.
func (d *DropIn) Enabled(gate featuregate.Feature) bool { return d.Gates.Enabled(gate) }

// Deprecated returns the removed flags the command line used, in order.
func (d *DropIn) Deprecated() []string { return d.deprecated }

// pending is the last DropIn that Complete accepted: Execute applies its logging configuration
// and logs its warnings once the command line is parsed.
var (
	pendingMu sync.Mutex
	pending   *DropIn
)

// applyPending applies the logging configuration of the parsed DropIn, if any, and logs one
// warning per removed flag used.
func applyPending() error {
	pendingMu.Lock()
	d := pending
	pending = nil
	pendingMu.Unlock()
	if d == nil {
		return nil
	}
	if err := logsapi.ValidateAndApply(d.logging, d.logGates); err != nil {
		return err
	}
	for _, note := range d.notes {
		klog.Warning("Feature gates: " + note)
	}
	for _, name := range d.deprecated {
		klog.Warning(deprecationMessage(name))
	}
	return nil
}

// deprecationMessage is the warning logged for a removed flag.
func deprecationMessage(name string) string {
	switch {
	case name == groupsFlag:
		return "Flag --" + name + " is deprecated (removed upstream in v8.2); applied as --feature-gates=CSIVolumeGroupSnapshot=<value>"
	case isIgnored(name):
		return "Flag --" + name + " is deprecated (removed upstream) and has no effect"
	}
	return "Flag --" + name + " is deprecated (klog flags were removed upstream in v8.3); applied to the text log format; use the component-base logging flags instead"
}

func isIgnored(name string) bool {
	_, ok := ignoredFlags[name]
	return ok
}

// removedFlag is a flag upstream removed: setting it records the name once and passes the value on.
type removedFlag struct {
	d      *DropIn
	name   string
	target flag.Value
}

func (f *removedFlag) String() string {
	if f == nil || f.target == nil {
		return ""
	}
	return f.target.String()
}

func (f *removedFlag) Set(v string) error {
	if err := f.target.Set(v); err != nil {
		return err
	}
	for _, seen := range f.d.deprecated {
		if seen == f.name {
			return nil
		}
	}
	f.d.deprecated = append(f.d.deprecated, f.name)
	return nil
}

// IsBoolFlag lets a boolean removed flag be given without a value, as before.
func (f *removedFlag) IsBoolFlag() bool {
	b, ok := f.target.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// boolSink stores a boolean flag's value into *p.
type boolSink struct{ p **bool }

func (b boolSink) String() string {
	if b.p == nil || *b.p == nil {
		return ""
	}
	return strconv.FormatBool(**b.p)
}

func (b boolSink) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("must be true or false")
	}
	*b.p = &on
	return nil
}

func (b boolSink) IsBoolFlag() bool { return true }

// ignored accepts any value (or none, when isBool).
type ignored struct{ isBool bool }

func (ignored) String() string     { return "" }
func (ignored) Set(string) error   { return nil }
func (i ignored) IsBoolFlag() bool { return i.isBool }
