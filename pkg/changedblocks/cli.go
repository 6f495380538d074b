package changedblocks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
)

// Usage is the help text of `kubectl shutter changed-blocks`.
const Usage = `kubectl shutter changed-blocks lists the allocated block ranges of a volume snapshot, or the
ranges that changed since a base snapshot, through the driver's snapshot-metadata service.

Usage:
  kubectl shutter changed-blocks NAMESPACE/SNAPSHOT [--base SNAPSHOT | --base-id HANDLE] [-o json]
  kubectl shutter changed-blocks NAMESPACE/SNAPSHOT [--base SNAPSHOT] --source FILE --verify TARGET

The caller needs a token for the service's audience: --token-file reads one (a projected
ServiceAccount token), else one is requested for --service-account (default: the ServiceAccount
the caller runs as). That ServiceAccount must be allowed to get volumesnapshots in NAMESPACE.
--verify copies the listed ranges from --source (a copy of SNAPSHOT, e.g. a restored volume's
device) onto TARGET (a copy of the base snapshot, or an empty volume) and compares their sha256.

Flags:
`

// cliOptions are the command's flags.
type cliOptions struct {
	kubeconfig, kubeContext   string
	base, baseID, output      string
	serviceAccount, tokenFile string
	verify, source            string
	startingOffset            int64
	maxResults                int32
}

// Run runs `kubectl shutter changed-blocks` with args (after the command's name).
func Run(ctx context.Context, args []string, out, errOut io.Writer) error {
	var o cliOptions
	fs := pflag.NewFlagSet("changed-blocks", pflag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file; default $KUBECONFIG, ~/.kube/config or in-cluster.")
	fs.StringVar(&o.kubeContext, "context", "", "The kubeconfig context to use.")
	fs.StringVar(&o.base, "base", "", "List the ranges changed since this VolumeSnapshot of the same namespace.")
	fs.StringVar(&o.baseID, "base-id", "", "List the ranges changed since the snapshot with this CSI handle (its VolumeSnapshot may be gone).")
	fs.StringVarP(&o.output, "output", "o", "", "Output: json (one JSON object per batch) or the default table.")
	fs.StringVar(&o.serviceAccount, "service-account", "", "NAMESPACE/NAME of the ServiceAccount to request a token for.")
	fs.StringVar(&o.tokenFile, "token-file", "", "Read the token from this file instead of requesting one.")
	fs.StringVar(&o.verify, "verify", "", "Apply the ranges from --source onto this file or device and compare the two.")
	fs.StringVar(&o.source, "source", "", "With --verify: a copy of the snapshot to read the ranges from.")
	fs.Int64Var(&o.startingOffset, "starting-offset", 0, "Byte offset to start listing at.")
	fs.Int32Var(&o.maxResults, "max-results", 0, "Most ranges per batch; 0 lets the driver choose.")
	fs.Usage = func() { fmt.Fprint(errOut, Usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || !strings.Contains(fs.Arg(0), "/") {
		return errors.New("usage: changed-blocks NAMESPACE/SNAPSHOT [--base SNAPSHOT] [-o json] [--verify TARGET --source FILE]")
	}
	if (o.verify == "") != (o.source == "") || (o.base != "" && o.baseID != "") || (o.output != "" && o.output != "json") {
		return errors.New("--verify needs --source; --base and --base-id exclude each other; -o takes json")
	}
	namespace, name, _ := strings.Cut(fs.Arg(0), "/")
	return o.run(ctx, namespace, name, out)
}

func (o cliOptions) run(ctx context.Context, namespace, name string, out io.Writer) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.kubeContext}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	snapshots, err := clientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	snap, err := Resolve(ctx, snapshots, namespace, name)
	if err != nil {
		return err
	}
	req := Request{Namespace: namespace, Snapshot: name, BaseID: o.baseID, StartingOffset: o.startingOffset, MaxResults: o.maxResults}
	if o.base != "" {
		base, err := Resolve(ctx, snapshots, namespace, o.base)
		if err != nil {
			return fmt.Errorf("base: %w", err)
		}
		req.BaseID = base.Handle
	}
	svc, err := Dial(ctx, snapshots, snap.Driver)
	if err != nil {
		return err
	}
	defer func() { _ = svc.Close() }()
	if req.Token, err = o.token(ctx, kube, svc.Audience); err != nil {
		return err
	}
	if o.verify != "" {
		return verify(ctx, svc, req, o.source, o.verify, out)
	}
	return list(ctx, svc, req, o.output, out)
}

// token reads --token-file, or requests a token for --service-account, else for the
// ServiceAccount the caller is.
func (o cliOptions) token(ctx context.Context, kube kubernetes.Interface, audience string) (string, error) {
	if o.tokenFile != "" {
		data, err := os.ReadFile(o.tokenFile)
		return strings.TrimSpace(string(data)), err
	}
	sa := o.serviceAccount
	if sa == "" {
		review, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("find out who the caller is (give --service-account or --token-file): %w", err)
		}
		user := review.Status.UserInfo.Username
		rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
		if !ok {
			return "", fmt.Errorf("the caller %q is not a ServiceAccount: give --service-account or --token-file", user)
		}
		sa = strings.Replace(rest, ":", "/", 1)
	}
	ns, name, ok := strings.Cut(sa, "/")
	if !ok {
		return "", fmt.Errorf("--service-account %q: want NAMESPACE/NAME", sa)
	}
	return Token(ctx, kube, ns, name, audience)
}

func list(ctx context.Context, svc *Service, req Request, output string, out io.Writer) error {
	enc := json.NewEncoder(out)
	header := false
	return svc.List(ctx, req, func(b Batch) error {
		if output == "json" {
			return enc.Encode(b)
		}
		if !header {
			fmt.Fprintf(out, "# %s, volume capacity %d bytes\n%-20s %s\n", b.Type, b.Capacity, "OFFSET", "SIZE")
			header = true
		}
		for _, r := range b.Ranges {
			fmt.Fprintf(out, "%-20d %d\n", r.Offset, r.Size)
		}
		return nil
	})
}

// verify applies the listed ranges from source onto target and compares the two whole.
func verify(ctx context.Context, svc *Service, req Request, source, target string, out io.Writer) error {
	src, err := os.Open(source)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(target, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer dst.Close()
	var ranges, covered int64
	err = svc.List(ctx, req, func(b Batch) error {
		ranges += int64(len(b.Ranges))
		for _, r := range b.Ranges {
			covered += r.Size
		}
		return Apply(src, dst, b.Ranges)
	})
	if err != nil {
		return err
	}
	if err := dst.Sync(); err != nil {
		return err
	}
	a, err := digest(src)
	if err != nil {
		return err
	}
	b, err := digest(dst)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "applied %d ranges (%d bytes)\nsource sha256 %s\ntarget sha256 %s\n", ranges, covered, a, b)
	if a != b {
		return errors.New("verification failed: the target differs from the source")
	}
	fmt.Fprintln(out, "verified: equal")
	return nil
}

func digest(f *os.File) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
