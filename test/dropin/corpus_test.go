package dropin

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/shutter-csi/shutter/test/testenv"
)

// entry is one command line of testdata/corpus.yaml.
type entry struct {
	Project, Path, Version, Binary, Command string
	Args                                    []string
	// Distributed lists enable distributed snapshotting, whose contents need volumes with node
	// affinity: the test only starts them.
	Distributed bool
}

func readCorpus(t *testing.T) []entry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "corpus.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []entry
	if err := yaml.UnmarshalStrict(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCorpus starts Shutter's binary with each command line of the corpus, as upstream's
// ServiceAccount, and takes, restores and deletes a snapshot through it (the other component
// runs with the flags TestUpstreamRBAC uses).
func TestCorpus(t *testing.T) {
	corpus := readCorpus(t)
	if len(corpus) < 20 {
		t.Fatalf("the corpus has %d command lines, want at least 20", len(corpus))
	}
	setUp(t)
	ns := testenv.Namespace(t, suite.kube)
	for _, e := range corpus {
		t.Run(e.Project+"/"+e.Path, func(t *testing.T) {
			if e.Command != "" && e.Command != "/"+e.Binary {
				t.Fatalf("command %s is not the image's binary path /%s", e.Command, e.Binary)
			}
			addr := freeAddress(t)
			args, served := localArgs(t, e, addr)
			switch e.Binary {
			case "csi-snapshotter":
				ctrlAddr := freeAddress(t)
				ctrl := component(t, "snapshot-controller", "corpus-controller", controllerArgs(ctrlAddr)...)
				side := component(t, e.Binary, "corpus-"+e.Binary, args...)
				waitServing(t, ctrl, "http://"+ctrlAddr+"/healthz")
				waitServing(t, side, "http://"+served+"/healthz")
			case "snapshot-controller":
				sideAddr := freeAddress(t)
				ctrl := component(t, e.Binary, "corpus-"+e.Binary, args...)
				side := component(t, "csi-snapshotter", "corpus-sidecar", sidecarArgs(sideAddr)...)
				waitServing(t, ctrl, "http://"+served+"/healthz")
				waitServing(t, side, "http://"+sideAddr+"/healthz")
				if e.Distributed {
					return
				}
			default:
				t.Fatalf("unknown binary %q", e.Binary)
			}
			snapshotLifecycle(t, ns)
		})
	}
}

var placeholder = regexp.MustCompile(`\$\(([A-Z_]+)\)|\$\{([A-Z_]+)\}|\{\{ \.Release\.Namespace \}\}`)

// localArgs turns an entry's command line into one for this machine: placeholders filled in,
// --csi-address pointing at the test driver's socket in the same form, the HTTP endpoint on
// 127.0.0.1 (added at addr when the line has none, so the test can see the process serve), and
// the ServiceAccount's kubeconfig appended. It returns the arguments and the address served.
func localArgs(t *testing.T, e entry, addr string) ([]string, string) {
	t.Helper()
	env := map[string]string{
		"POD_IP": "127.0.0.1", "LOG_LEVEL": "2", "KUBE_API_QPS": "50", "KUBE_API_BURST": "100", "METRICS_PORT": port(addr),
		"LOCAL_METRICS_PORT": port(addr), "LEADER_ELECTION_LEASE_DURATION": "137s", "LEADER_ELECTION_RENEW_DEADLINE": "107s",
		"LEADER_ELECTION_RETRY_PERIOD": "26s", "NODE_NAMESPACE": "default", "PDCSI_NAMESPACE": "default", "POD_NAMESPACE": "default",
		"ADDRESS": "/csi/csi.sock",
	}
	kubeconfig := suite.sidecarKC
	if e.Binary == "snapshot-controller" {
		kubeconfig = suite.controllerKC
	}
	var out []string
	served := ""
	for _, a := range e.Args {
		a = placeholder.ReplaceAllStringFunc(a, func(m string) string {
			if strings.HasPrefix(m, "{{") {
				return "default"
			}
			name := strings.Trim(m, "$(){}")
			v, ok := env[name]
			if !ok {
				t.Fatalf("no value for %s in %q", m, a)
			}
			return v
		})
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case name == "csi-address" && hasValue:
			if strings.HasPrefix(value, "unix://") {
				a = "--csi-address=unix://" + suite.socket
			} else {
				a = "--csi-address=" + suite.socket
			}
		case (name == "http-endpoint" || name == "metrics-address") && hasValue:
			a, served = "--"+name+"="+addr, addr
		}
		out = append(out, a)
	}
	if served == "" {
		out, served = append(out, "--http-endpoint="+addr), addr
	}
	return append(out, "--kubeconfig="+kubeconfig), served
}

func port(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }
