package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestLocalNodeValuesNameTheProvisionerImage: the chart's values for the local node must name the
// external-provisioner image that the node gets, whose tag follows hack/tools/provisioner.
func TestLocalNodeValuesNameTheProvisionerImage(t *testing.T) {
	ref, err := ProvisionerImage()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(sourceRoot(), "deploy", "helm", "shutter", "ci", "local-node-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Hostpath struct {
			Provisioner struct {
				Image struct{ Repository, Tag string }
			}
		}
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	image := values.Hostpath.Provisioner.Image
	if got := image.Repository + ":" + image.Tag; got != ref {
		t.Errorf("ci/local-node-values.yaml names %s, the node gets %s", got, ref)
	}
}
