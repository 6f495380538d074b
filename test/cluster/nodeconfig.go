package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// nodePaths are the files and folders of the node under the state folder.
type nodePaths struct {
	dir              string // Dir/node
	containerdRoot   string
	containerdState  string
	containerdSocket string
	containerdConfig string
	registryConfig   string // containerd's registry hosts folder (config_path)
	resolvConf       string // the pods' resolv.conf
	cniBin           string
	cniConf          string
	kubeletRoot      string
	kubeletConfig    string
	kubeconfig       string
	podLogs          string
}

func newNodePaths(stateDir string) nodePaths {
	dir := filepath.Join(stateDir, "node")
	return nodePaths{
		dir:              dir,
		containerdRoot:   filepath.Join(dir, "containerd", "root"),
		containerdState:  filepath.Join(dir, "containerd", "state"),
		containerdSocket: filepath.Join(dir, "containerd", "containerd.sock"),
		containerdConfig: filepath.Join(dir, "containerd", "config.toml"),
		registryConfig:   filepath.Join(dir, "containerd", "certs.d"),
		resolvConf:       filepath.Join(dir, "resolv.conf"),
		cniBin:           filepath.Join(dir, "cni", "bin"),
		cniConf:          filepath.Join(dir, "cni", "net.d"),
		kubeletRoot:      filepath.Join(dir, "kubelet"),
		kubeletConfig:    filepath.Join(dir, "kubelet-config.yaml"),
		kubeconfig:       filepath.Join(dir, "kubelet.kubeconfig"),
		podLogs:          filepath.Join(dir, "pod-logs"),
	}
}

// maxSocketPath is the longest path a unix socket may have (sun_path holds 108 bytes).
const maxSocketPath = 107

// ClosedRegistry is where the node sends every image pull unless NodeOptions.Registry says
// otherwise: a loopback port that only root could listen on and nothing does, so a pull of an
// image the node does not hold fails at once, and on loopback.
const ClosedRegistry = "127.0.0.1:1"

// containerdConfig is containerd's configuration: everything under the node's folder, the CRI
// with cgroupfs, the pinned sandbox image, and registry hosts from the node's own folder (see
// registryHosts), for the CRI's pulls and the transfer service's alike.
func containerdConfig(p nodePaths, binDir, sandboxImage string) string {
	q := strconv.Quote
	return `version = 3
root = ` + q(p.containerdRoot) + `
state = ` + q(p.containerdState) + `

[grpc]
  address = ` + q(p.containerdSocket) + `

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = ` + q(sandboxImage) + `
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = ` + q(p.registryConfig) + `

[plugins.'io.containerd.transfer.v1.local']
  config_path = ` + q(p.registryConfig) + `

[plugins.'io.containerd.cri.v1.runtime']
  # The sandbox lacks CAP_SYS_RESOURCE: without this every pod sandbox fails to start.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = [` + q(filepath.Join(p.dir, "cdi")) + `]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      runtime_path = ` + q(filepath.Join(binDir, "containerd-shim-runc-v2")) + `
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = ` + q(filepath.Join(binDir, "runc")) + `
        Root = ` + q(filepath.Join(p.dir, "runc")) + `
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [` + q(p.cniBin) + `]
    conf_dir = ` + q(p.cniConf) + `

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'

[plugins.'io.containerd.nri.v1.nri']
  disable = true
`
}

// registryHosts is the hosts.toml of containerd's "_default" registry folder, which applies to
// every registry that has no folder of its own (and none has): the registry's name is never
// looked up, every request goes to the loopback address server instead, over plain HTTP.
func registryHosts(server string) string {
	return "# Every registry is this loopback address: the node never reaches the network.\n" +
		"server = " + strconv.Quote("http://"+server) + "\n"
}

// resolvConf is the pods' resolv.conf (kubelet's resolvConf): a loopback name server, where
// none listens, so a name that /etc/hosts does not hold fails on loopback too.
const resolvConf = "nameserver 127.0.0.1\n"

// loopbackConflist is the node's only network: loopback. It makes the runtime report its network
// ready; pods run with hostNetwork.
const loopbackConflist = `{
  "cniVersion": "1.0.0",
  "name": "shutter-loopback",
  "plugins": [{"type": "loopback"}]
}
`

// kubeletSettings are the values of kubelet's configuration file that vary per node.
type kubeletSettings struct {
	cgroupRoot  string
	port        int
	healthzPort int
}

// kubeletConfig is kubelet's configuration file: cgroup v1 with cgroupfs, servers on 127.0.0.1
// only, clients authenticated by the cluster's CA, no eviction or image collection that a busy
// shared disk could trigger, and every folder inside the node's.
func kubeletConfig(p nodePaths, stateDir string, s kubeletSettings) string {
	q := strconv.Quote
	f := func(name string) string { return q(filepath.Join(stateDir, name)) }
	lines := []string{
		"apiVersion: kubelet.config.k8s.io/v1beta1",
		"kind: KubeletConfiguration",
		"failCgroupV1: false",
		"cgroupDriver: cgroupfs",
		"cgroupRoot: " + q("/"+s.cgroupRoot),
		"failSwapOn: false",
		"containerRuntimeEndpoint: " + q("unix://"+p.containerdSocket),
		"address: 127.0.0.1",
		"port: " + strconv.Itoa(s.port),
		"readOnlyPort: 0",
		"healthzBindAddress: 127.0.0.1",
		"healthzPort: " + strconv.Itoa(s.healthzPort),
		"tlsCertFile: " + f("kubelet-serving.crt"),
		"tlsPrivateKeyFile: " + f("kubelet-serving.key"),
		"authentication:",
		"  anonymous: {enabled: false}",
		"  webhook: {enabled: false}",
		"  x509: {clientCAFile: " + f("ca.crt") + "}",
		"authorization: {mode: AlwaysAllow}",
		"podLogsDir: " + q(p.podLogs),
		"volumePluginDir: " + q(filepath.Join(p.dir, "flexvolume")),
		"evictionHard: {memory.available: 20Mi, nodefs.available: 1%, imagefs.available: 1%}",
		"imageGCHighThresholdPercent: 100",
		"imageGCLowThresholdPercent: 99",
		"nodeStatusReportFrequency: 10s",
		"resolvConf: " + q(p.resolvConf),
	}
	return strings.Join(lines, "\n") + "\n"
}

// writeNodeFiles lays down the node's folders and configuration files.
func writeNodeFiles(p nodePaths, stateDir, binDir, sandboxImage, registry string, s kubeletSettings) error {
	if n := len(p.containerdSocket); n > maxSocketPath {
		return fmt.Errorf("state folder too deep: containerd's socket path would be %d bytes, at most %d work", n, maxSocketPath)
	}
	defaultHosts := filepath.Join(p.registryConfig, "_default")
	for _, d := range []string{p.containerdRoot, p.containerdState, p.cniBin, p.cniConf, p.kubeletRoot, p.podLogs, defaultHosts} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	link := filepath.Join(p.cniBin, "loopback")
	_ = os.Remove(link)
	if err := os.Symlink(filepath.Join(binDir, "loopback"), link); err != nil {
		return err
	}
	files := map[string]string{
		p.containerdConfig: containerdConfig(p, binDir, sandboxImage),
		filepath.Join(p.cniConf, "10-loopback.conflist"): loopbackConflist,
		p.kubeletConfig: kubeletConfig(p, stateDir, s),
		filepath.Join(defaultHosts, "hosts.toml"): registryHosts(registry),
		p.resolvConf: resolvConf,
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}
