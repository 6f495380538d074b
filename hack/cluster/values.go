package main

import (
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/shutter-csi/shutter/test/cluster"
)

// components are the repositories of Shutter's own images, as the chart names them.
var components = []string{"snapshot-controller", "csi-snapshotter", "hostpath-driver", "snapshot-conversion-webhook", "csi-snapshot-metadata"}

// writeNodeValues writes DIR/node-values.yaml: the chart values that change with each start of a
// node (the API server's port, the kubelet's folder) and, when images holds Shutter's images,
// their registry and tag.
func writeNodeValues(c *cluster.Cluster, images []string) (string, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return "", err
	}
	global := map[string]any{"kubernetesServicePort": u.Port()}
	registry, tag, err := shutterImages(images)
	if err != nil {
		return "", err
	}
	if registry != "" {
		global["imageRegistry"], global["imageTag"] = registry, tag
	}
	hostpath := map[string]any{
		"kubeletDir": c.KubeletDir,
		"dataDir":    filepath.Join(c.Dir, "node", "hostpath-data"),
	}
	if len(c.Nodes) > 1 {
		// Every node sees its own folder at DataDir (its mount namespace).
		hostpath["dataDir"], hostpath["mode"] = c.DataDir, "distributed"
		// Servers listen on the pod's IP, its node's own address, where kubelet probes them.
		global["listenAddress"] = ""
	}
	values := map[string]any{"global": global, "hostpath": hostpath}
	data, err := yaml.Marshal(values)
	if err != nil {
		return "", err
	}
	out := filepath.Join(c.Dir, "node-values.yaml")
	header := "# Chart values of the node in this folder, written by hack/cluster up -node.\n"
	return out, os.WriteFile(out, append([]byte(header), data...), 0o644)
}

// shutterImages returns the registry and tag of the first of Shutter's images among the tars'
// images ("", "" when there is none).
func shutterImages(tars []string) (registry, tag string, err error) {
	for _, t := range tars {
		names, err := cluster.ImageNames(t)
		if err != nil {
			return "", "", err
		}
		for _, n := range names {
			at := strings.LastIndex(n, ":")
			if at < 0 || strings.Contains(n[at:], "/") {
				continue
			}
			repo := n[:at]
			for _, c := range components {
				if path.Base(repo) == c {
					return path.Dir(repo), n[at+1:], nil
				}
			}
		}
	}
	return "", "", nil
}
