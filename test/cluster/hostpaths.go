package cluster

// Paths outside the state folder that containerd and kubelet use whatever they are configured
// with, and how the node's cleanup clears them.

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// containerdRunDir is containerd's default state folder; whatever the state folder it is given,
// its shims put their sockets in the s folder below (defaults.DefaultStateDir + "/s").
const (
	containerdRunDir = "/run/containerd"
	shimSocketDir    = containerdRunDir + "/s"
)

// containerLogDir is where kubelet links every container's log, whatever its configuration.
const containerLogDir = "/var/log/containers"

// kubeletDefaultDir and the device plugin socket below it are used whatever kubelet's
// --root-dir (k8s.io/kubelet's deviceplugin DevicePluginPath).
const (
	kubeletDefaultDir = "/var/lib/kubelet"
	devicePluginDir   = kubeletDefaultDir + "/device-plugins"
)

// hostDirs are the folders that kubelet makes when they are missing, each with the files kubelet
// puts in it, children before parents.
var hostDirs = []struct {
	dir   string
	files []string
}{
	{containerLogDir, nil},
	{devicePluginDir, []string{"kubelet.sock", "kubelet_internal_checkpoint"}},
	{kubeletDefaultDir, nil},
}

// madeDirsFile, in the node's folder, lists the hostDirs that did not exist before the node.
const madeDirsFile = "made-host-dirs"

// recordHostDirs notes which of hostDirs are missing before the node starts.
func recordHostDirs(p nodePaths) error {
	var missing []string
	for _, d := range hostDirs {
		if _, err := os.Stat(d.dir); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, d.dir)
		}
	}
	return os.WriteFile(filepath.Join(p.dir, madeDirsFile), []byte(strings.Join(missing, "\n")), 0o600)
}

// removeHostDirs removes the hostDirs the node made, with kubelet's files in them; a folder that
// holds anything else stays.
func removeHostDirs(p nodePaths) error {
	data, err := os.ReadFile(filepath.Join(p.dir, madeDirsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	made := strings.Fields(string(data))
	for _, d := range hostDirs {
		if !slices.Contains(made, d.dir) {
			continue
		}
		for _, f := range d.files {
			if err := os.Remove(filepath.Join(d.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		_ = os.Remove(d.dir) // fails if something else is in it
	}
	return nil
}

// removeShimSockets removes the sockets of the node's shims. A shim that is killed leaves its
// socket behind; its name is the SHA-256 of containerd's socket path, namespace and container.
func removeShimSockets(p nodePaths) error {
	tasks, err := os.ReadDir(filepath.Join(p.containerdState, "io.containerd.runtime.v2.task", "k8s.io"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, task := range tasks {
		base := filepath.Join(p.containerdSocket, "k8s.io", task.Name())
		for _, path := range []string{base, filepath.Join(base, "debug")} {
			sock := filepath.Join(shimSocketDir, fmt.Sprintf("%x", sha256.Sum256([]byte(path))))
			if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	// Only empty folders go: a containerd of the host keeps its shims' sockets there too. fifo
	// is where ctr's clients keep their pipes.
	for _, dir := range []string{shimSocketDir, filepath.Join(containerdRunDir, "fifo"), containerdRunDir} {
		_ = os.Remove(dir)
	}
	return nil
}

// removeLogLinks removes kubelet's links to the node's pod logs.
func removeLogLinks(p nodePaths) error {
	entries, err := os.ReadDir(containerLogDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, e := range entries {
		path := filepath.Join(containerLogDir, e.Name())
		if target, err := os.Readlink(path); err == nil && strings.HasPrefix(target, p.podLogs+"/") {
			if err := os.Remove(path); err != nil {
				return err
			}
		}
	}
	return nil
}
