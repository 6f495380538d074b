// Package cluster runs a real Kubernetes control plane (etcd, kube-apiserver and
// kube-controller-manager) as local processes on 127.0.0.1, for Shutter's integration tests, the
// demo and `make cluster-up`. Without a node, pods stay Pending and Shutter's components run as
// host processes beside it. With Options.Node (root only), a node runs too: containerd, kubelet
// and kube-scheduler, for hostNetwork pods of locally built images.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
	// readyTimeout bounds the wait for each component; a cold start takes about 7 s.
	readyTimeout = 90 * time.Second
)

// Options configure a local control plane.
type Options struct {
	// Dir is the state folder: certificates, etcd data, logs, pid files and the kubeconfig.
	Dir string
	// BinDir holds the etcd, kube-apiserver and kube-controller-manager binaries.
	BinDir string
	// Detach lets the processes outlive the caller (make cluster-up); otherwise they die with it.
	Detach bool
	// AuditPolicy, when set, is a kube-apiserver audit policy file; the log is Dir/audit.log.
	AuditPolicy string
	// APIServerArgs are extra kube-apiserver flags.
	APIServerArgs []string
	// EtcdArgs are extra etcd flags.
	EtcdArgs []string
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
	// Node, when set, starts a node as well; BinDir must then hold NodeTools too.
	Node *NodeOptions
	// Nodes, with Node, is the number of nodes: more than one start each in namespaces of its
	// own (nodes.go); 0 or 1 is the single node on the host's network.
	Nodes int
}

// Cluster is a running local control plane.
type Cluster struct {
	// Dir is the state folder.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig (system:masters).
	Kubeconfig string
	// Config is the admin client configuration.
	Config *rest.Config
	// URL is the API server's address.
	URL string
	// KubeletDir is the node's kubelet root folder (the chart's hostpath.kubeletDir); "" without
	// a node.
	KubeletDir string
	// DataDir is the hostpath driver's data folder every node sees as its own (the chart's
	// hostpath.dataDir); "" but with several nodes.
	DataDir string
	// Nodes are the nodes of a cluster of several (Options.Nodes > 1).
	Nodes []Node

	procs   []*process
	node    *nodePaths
	fwd     *forwarder
	multi   []nodeSpec
	opts    Options
	etcdURL string
}

// KubeconfigName is the admin kubeconfig's file name inside the state folder.
const KubeconfigName = "admin.kubeconfig"

// Start lays down certificates and starts etcd, kube-apiserver and kube-controller-manager, and
// returns once the API server is ready. On error, whatever was started is stopped again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	started := time.Now()
	c = &Cluster{Dir: dir, Kubeconfig: filepath.Join(dir, KubeconfigName), opts: opts}
	// The failure returns below set c to nil: stop what started through a copy of it (stopping
	// through c itself panicked, and left a started node's mounts and processes behind).
	cluster := c
	defer func() {
		if err != nil {
			_ = cluster.Stop()
		}
	}()
	nodeName := ""
	if opts.Node != nil && opts.Nodes <= 1 {
		nodeName = NodeName
	}
	if err := writeCertificates(dir, nodeName); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	ports, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	c.etcdURL = etcdURL
	c.URL = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	if err := writeKubeconfig(c.Kubeconfig, c.URL, dir, "admin"); err != nil {
		return nil, err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, err
	}

	fmt.Fprintf(opts.Progress, "cluster: starting etcd on %s\n", etcdURL)
	if err := c.run(opts, "etcd", append(etcdArgs(dir, etcdURL, ports[1]), opts.EtcdArgs...)); err != nil {
		return nil, err
	}
	if err := c.waitHealthy(ctx, etcdURL+"/health", nil); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Progress, "cluster: starting kube-apiserver on %s\n", c.URL)
	if err := c.run(opts, "kube-apiserver", apiserverArgs(opts, etcdURL, ports[2])); err != nil {
		return nil, err
	}
	tlsConfig, err := rest.TLSConfigFor(c.Config)
	if err != nil {
		return nil, err
	}
	if err := c.waitHealthy(ctx, c.URL+"/readyz", tlsConfig); err != nil {
		return nil, err
	}
	fmt.Fprintln(opts.Progress, "cluster: starting kube-controller-manager")
	if err := c.run(opts, "kube-controller-manager", controllerManagerArgs(dir, c.Kubeconfig, ports[3])); err != nil {
		return nil, err
	}
	if opts.Node != nil {
		start := c.startNode
		if opts.Nodes > 1 {
			start = c.startNodes
		}
		if err := start(ctx, opts, nodePorts{kubelet: ports[4], kubeletHealthz: ports[5], scheduler: ports[6]}); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	fmt.Fprintf(opts.Progress, "cluster: ready in %.1fs; KUBECONFIG=%s\n", time.Since(started).Seconds(), c.Kubeconfig)
	return c, nil
}

func etcdArgs(dir, clientURL string, peerPort int) []string {
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	return []string{
		"--name=shutter", "--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=shutter=" + peerURL,
		// Test data need not survive a power cut; fsync would dominate the run time.
		"--unsafe-no-fsync", "--log-level=warn",
	}
}

func apiserverArgs(opts Options, etcdURL string, port int) []string {
	f := func(name string) string { return filepath.Join(opts.Dir, name) }
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--endpoint-reconciler-type=none", "--service-cluster-ip-range=" + serviceCIDR,
		"--tls-cert-file=" + f("apiserver.crt"), "--tls-private-key-file=" + f("apiserver.key"),
		"--client-ca-file=" + f("ca.crt"), "--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f("sa.pub"), "--service-account-signing-key-file=" + f("sa.key"),
		"--requestheader-client-ca-file=" + f("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f("front-proxy-client.crt"),
		"--proxy-client-key-file=" + f("front-proxy-client.key"),
		"--cert-dir=" + f("apiserver-certs"),
		"--kubelet-client-certificate=" + f("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + f("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + f("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
		// The hostpath driver's container is privileged (it mounts); without this the API server
		// rejects its pod ("privileged: Forbidden: disallowed by cluster policy").
		"--allow-privileged=true",
	}
	if opts.AuditPolicy != "" {
		args = append(args, "--audit-policy-file="+opts.AuditPolicy, "--audit-log-path="+f("audit.log"),
			"--audit-log-format=json", "--audit-log-mode=batch")
	}
	return append(args, opts.APIServerArgs...)
}

func controllerManagerArgs(dir, kubeconfig string, port int) []string {
	f := func(name string) string { return filepath.Join(dir, name) }
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--leader-elect=false", "--use-service-account-credentials=false",
		"--root-ca-file=" + f("ca.crt"), "--service-account-private-key-file=" + f("sa.key"),
		"--cluster-signing-cert-file=" + f("ca.crt"), "--cluster-signing-key-file=" + f("ca.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		// Its default plugin folder is under /usr/libexec; keep everything inside the state folder.
		"--flex-volume-plugin-dir=" + f("flexvolume"),
		"--cert-dir=" + f("kcm-certs"),
	}
}

// writeKubeconfig writes a kubeconfig for server that authenticates with the certificate pair
// dir/<user>.crt and .key.
func writeKubeconfig(path, server, dir, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["shutter"] = &clientcmdapi.Cluster{
		Server: server, CertificateAuthority: filepath.Join(dir, "ca.crt"),
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificate: filepath.Join(dir, user+".crt"), ClientKey: filepath.Join(dir, user+".key"),
	}
	cfg.Contexts["shutter"] = &clientcmdapi.Context{Cluster: "shutter", AuthInfo: user}
	cfg.CurrentContext = "shutter"
	return clientcmd.WriteToFile(*cfg, path)
}

// waitHealthy polls url until it answers 200, a process exits, or readyTimeout passes.
func (c *Cluster) waitHealthy(ctx context.Context, url string, tlsConfig *tls.Config) error {
	return c.waitHealthyIn(ctx, "", url, tlsConfig)
}

// waitHealthyIn is waitHealthy for a url inside the network namespace netns ("" for the host's).
func (c *Cluster) waitHealthyIn(ctx context.Context, netns, url string, tlsConfig *tls.Config) error {
	transport := &http.Transport{TLSClientConfig: tlsConfig}
	if netns != "" {
		transport.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) { return DialIn(ctx, netns, addr) }
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: transport}
	defer client.CloseIdleConnections()
	return c.poll(ctx, readyTimeout, url+" to answer 200", func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return false, nil // not listening yet
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, p := range c.procs {
		b.WriteString("\n--- " + p.name + " log tail ---\n" + p.tail(20))
	}
	return b.String()
}

// Stop ends every process this Cluster started, the last started first, and cleans up after the
// node (see cleanNode). The state folder stays. It returns what could not be cleaned up; a second
// call does nothing.
func (c *Cluster) Stop() error {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
	c.procs = nil
	return errors.Join(c.stopNode(), c.stopNodes())
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ErrNotRunning says that a state folder holds no running control plane.
var ErrNotRunning = errors.New("no local control plane is running there")
