// Package diagnose is `kubectl shutter`: it explains why a VolumeSnapshot, VolumeSnapshotContent
// or VolumeGroupSnapshot is not ready or not gone. It reads the public snapshot API, the claims and
// volumes, the events and the leader-election Leases of the components, and never writes, so it
// works with any snapshot-controller and csi-snapshotter that follow the public protocol.
package diagnose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
)

// Exit codes of the plugin.
const (
	// ExitOK: the command ran; stuck objects found are no error.
	ExitOK = 0
	// ExitError: bad usage, an object not found, or an API error.
	ExitError = 1
)

// Output formats.
const (
	OutputText = ""
	OutputWide = "wide"
	OutputJSON = "json"
	OutputYAML = "yaml"
)

// Options are the plugin's flags and arguments.
type Options struct {
	// Kubeconfig, Context and Namespace select the cluster as kubectl does; Namespace empty means
	// the context's namespace.
	Kubeconfig, Context, Namespace string
	// AllNamespaces lists stuck objects of every namespace.
	AllNamespaces bool
	// Output is one of the Output* formats.
	Output string
	// For is how long an object must have been not ready, or not gone, to count as stuck.
	For time.Duration
	// SortBy orders stuck objects: age (oldest first), name, namespace, kind or reason.
	SortBy string
	// ChunkSize is the page size of lists; 0 reads them whole.
	ChunkSize int64
	// LeaseNamespaces are namespaces whose Leases count besides kube-system and those whose
	// ServiceAccounts may write VolumeSnapshotContents (kube.LeaseNamespaces).
	LeaseNamespaces []string
	// Args are the command and its arguments: describe KIND NAME, or stuck.
	Args []string
	// Out receives the result, Err the notes.
	Out, Err io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// AddFlags registers the plugin's flags, named as kubectl names them.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to the kubeconfig file; default $KUBECONFIG or ~/.kube/config.")
	fs.StringVar(&o.Context, "context", "", "The kubeconfig context to use.")
	fs.StringVarP(&o.Namespace, "namespace", "n", "", "Namespace; default the context's namespace.")
	fs.BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "stuck: look at every namespace.")
	fs.StringVarP(&o.Output, "output", "o", "", "Output format: json, yaml, or wide (stuck).")
	fs.DurationVar(&o.For, "for", 5*time.Minute, "stuck: how long an object must have been not ready, or not deleted.")
	fs.StringVar(&o.SortBy, "sort-by", "age", "stuck: order by age (oldest first), name, namespace, kind or reason.")
	fs.Int64Var(&o.ChunkSize, "chunk-size", defaultChunkSize, "Read large lists in chunks of this many objects rather than all at once, as kubectl does; 0 reads them whole.")
	fs.StringSliceVar(&o.LeaseNamespaces, "lease-namespaces", nil, "Namespaces whose Leases tell that the snapshot-controller or a csi-snapshotter runs, besides kube-system and the namespaces whose ServiceAccounts a ClusterRoleBinding lets write VolumeSnapshotContents.")
}

// defaultChunkSize is --chunk-size's default, kubectl's.
const defaultChunkSize = 500

// Usage is the plugin's help text.
const Usage = `kubectl shutter explains why a volume snapshot is not ready or not deleted.

Usage:
  kubectl shutter describe snapshot NAME [-n NAMESPACE] [-o json|yaml]
  kubectl shutter describe content NAME [-o json|yaml]
  kubectl shutter describe group NAME [-n NAMESPACE] [-o json|yaml]
  kubectl shutter stuck [-A | -n NAMESPACE] [--for 5m] [--sort-by age|name|namespace|kind|reason] [-o json|yaml|wide]
  kubectl shutter changed-blocks NAMESPACE/SNAPSHOT [--base SNAPSHOT] [-o json] [--verify TARGET --source FILE]

describe prints the chain claim -> volume -> snapshot -> content -> class -> driver -> backend
snapshot with each object's state, finalizers (who removes each, and what it waits for), protocol
annotations and last events, and one line "Why: <reason>".
stuck lists every snapshot, content and group snapshot that has been not ready, or not deleted,
for longer than --for, with the same reason.
changed-blocks lists a snapshot's allocated or changed block ranges through the driver's
snapshot-metadata service (kubectl shutter changed-blocks --help).

Exit codes: 0 the command ran (stuck objects found are no error), 1 an error (bad usage, object
not found, API error).

Flags:
`

// Run runs the command in opts.Args.
func Run(ctx context.Context, opts Options) error {
	if len(opts.Args) == 0 {
		return errors.New("no command given: describe or stuck")
	}
	switch opts.Output {
	case OutputText, OutputWide, OutputJSON, OutputYAML:
	default:
		return fmt.Errorf("unknown output format %q (json, yaml, wide)", opts.Output)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s, namespace, err := connect(opts)
	if err != nil {
		return err
	}
	switch cmd, args := opts.Args[0], opts.Args[1:]; cmd {
	case "describe":
		if len(args) != 2 {
			return errors.New("usage: describe snapshot|content|group NAME")
		}
		return describe(ctx, s, opts, namespace, args[0], args[1])
	case "stuck":
		if len(args) != 0 {
			return fmt.Errorf("stuck takes no arguments, got %v", args)
		}
		if opts.AllNamespaces {
			namespace = allNamespaces
		}
		return stuck(ctx, s, opts, namespace)
	default:
		return fmt.Errorf("unknown command %q: describe or stuck", cmd)
	}
}

// connect builds the clients from the kubeconfig as kubectl does, and returns the namespace
// to work in.
func connect(opts Options) (*store, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: opts.Context}
	overrides.Context.Namespace = opts.Namespace
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	namespace, _, err := loader.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-shutter"
	if cfg.QPS == 0 {
		// kubectl's limits: with 50,000 snapshots, stuck -A reads about 200 pages.
		cfg.QPS, cfg.Burst = 50, 300
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	snap, err := clientset.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	return newStore(kube, snap, opts.Now(), opts.ChunkSize, opts.LeaseNamespaces), namespace, nil
}

// writeStructured writes v as JSON or YAML.
func writeStructured(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == OutputYAML {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
}
