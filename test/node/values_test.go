package node

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/shutter-csi/shutter/test/testenv"
)

// rendered is `helm template` of the chart, one document per kind and name.
type rendered = testenv.Rendered

func renderChart(t *testing.T, args ...string) rendered {
	t.Helper()
	return testenv.RenderChart(t, filepath.Join(builtTools(t, "helm", "helm"), "helm"), chartNamespace, args...)
}

// TestLocalNodeValues renders the chart as the local node installs it: two controller replicas
// with no port, probe or --http-endpoint (they share the node's network namespace), no metrics
// Service or Service-based test, and the Lease test with the workload image in the node's
// network, allowed to read the two Leases only. The defaults keep the HTTP endpoint.
func TestLocalNodeValues(t *testing.T) {
	docs := renderChart(t, "-f", filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter", "ci", "local-node-values.yaml"),
		"--set", "global.kubernetesServicePort=6443")
	var d appsv1.Deployment
	if !docs.Decode(t, "Deployment/shutter-snapshot-controller", &d) {
		t.Fatal("no controller Deployment")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Ports) != 0 || c.LivenessProbe != nil || c.ReadinessProbe != nil {
		t.Errorf("ports %v, liveness %v, readiness %v: want none", c.Ports, c.LivenessProbe, c.ReadinessProbe)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--http-endpoint") {
			t.Errorf("controller args hold %s", a)
		}
	}
	for _, key := range []string{"Service/shutter-snapshot-controller-metrics", "Pod/shutter-test-controller-health"} {
		if _, ok := docs[key]; ok {
			t.Errorf("%s is rendered", key)
		}
	}
	var pod corev1.Pod
	if !docs.Decode(t, "Pod/shutter-test-leases", &pod) {
		t.Fatal("no Lease test pod")
	}
	wantArgs := []string{"lease", chartNamespace, "snapshot-controller-leader", "external-snapshotter-leader-hostpath-csi-shutter-dev"}
	if tc := pod.Spec.Containers[0]; tc.Image != "localhost/shutter/workload:1.0" || !reflect.DeepEqual(tc.Args, wantArgs) {
		t.Errorf("test pod runs %s %q, want the workload image with %q", tc.Image, tc.Args, wantArgs)
	}
	if !pod.Spec.HostNetwork || pod.Spec.ServiceAccountName != "shutter-test-leases" {
		t.Errorf("test pod hostNetwork %v, service account %q", pod.Spec.HostNetwork, pod.Spec.ServiceAccountName)
	}
	var role rbacv1.Role
	if !docs.Decode(t, "Role/shutter-test-leases", &role) {
		t.Fatal("no Role for the Lease test")
	}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		ResourceNames: wantArgs[2:], Verbs: []string{"get"}}}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("Lease test rules %+v, want %+v", role.Rules, wantRules)
	}

	defaults := renderChart(t)
	if !defaults.Decode(t, "Deployment/shutter-snapshot-controller", &d) {
		t.Fatal("no controller Deployment")
	}
	if c := d.Spec.Template.Spec.Containers[0]; len(c.Ports) != 1 || c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Errorf("with the defaults: ports %v, liveness %v, readiness %v", c.Ports, c.LivenessProbe, c.ReadinessProbe)
	}
	for _, key := range []string{"Service/shutter-snapshot-controller-metrics", "Pod/shutter-test-controller-health"} {
		if _, ok := defaults[key]; !ok {
			t.Errorf("with the defaults %s is not rendered", key)
		}
	}
	if _, ok := defaults["Pod/shutter-test-leases"]; ok {
		t.Error("with the defaults the Lease test is rendered")
	}
}

// TestHostpathDriverValues renders the driver's container: by default it has a per-node volume
// limit and serves its metrics (the quarantine alert reads them), and keeps quarantined data;
// hostpath.driver.quarantineMaxAge sets an age limit.
func TestHostpathDriverValues(t *testing.T) {
	driverArgs := func(docs rendered) []string {
		t.Helper()
		var s appsv1.StatefulSet
		if !docs.Decode(t, "StatefulSet/shutter-hostpath", &s) {
			t.Fatal("no hostpath StatefulSet")
		}
		for _, c := range s.Spec.Template.Spec.Containers {
			if c.Name == "hostpath-driver" {
				return c.Args
			}
		}
		t.Fatal("no hostpath-driver container")
		return nil
	}
	has := func(args []string, prefix string) string {
		for _, a := range args {
			if strings.HasPrefix(a, prefix) {
				return a
			}
		}
		return ""
	}
	args := driverArgs(renderChart(t))
	for _, want := range []string{"--max-volumes-per-node=64", "--http-endpoint=[$(POD_IP)]:8083"} {
		if has(args, want) != want {
			t.Errorf("driver args %q lack %s", args, want)
		}
	}
	if a := has(args, "--quarantine-max-age"); a != "" {
		t.Errorf("with the defaults the driver deletes quarantined data: %s", a)
	}
	args = driverArgs(renderChart(t, "--set", "hostpath.driver.quarantineMaxAge=720h", "--set", "hostpath.driver.maxVolumesPerNode=0"))
	for _, want := range []string{"--quarantine-max-age=720h", "--max-volumes-per-node=0"} {
		if has(args, want) != want {
			t.Errorf("driver args %q lack %s", args, want)
		}
	}
}

// TestLocalNodeValuesNeverPull: with the local node's values every container of every
// workload the chart renders (the optional ones turned on too) uses pull policy Never, so an image
// the node lacks is ErrImageNeverPull and never a pull.
func TestLocalNodeValuesNeverPull(t *testing.T) {
	docs := renderChart(t, "-f", filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter", "ci", "local-node-values.yaml"),
		"--set", "global.kubernetesServicePort=6443", "--set", "hostpath.registrar.enabled=true",
		"--set", "conversionWebhook.enabled=true", "--set", "snapshotController.httpEndpoint.enabled=true")
	images := map[string]bool{}
	for key := range docs {
		var doc struct {
			Kind string
			Spec struct {
				corev1.PodSpec `json:",inline"`
				Template       struct{ Spec corev1.PodSpec }
			}
		}
		docs.Decode(t, key, &doc)
		for _, spec := range []corev1.PodSpec{doc.Spec.PodSpec, doc.Spec.Template.Spec} {
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				images[c.Image] = true
				if c.ImagePullPolicy != corev1.PullNever {
					t.Errorf("%s: container %s (%s) pull policy %q, want Never", key, c.Name, c.Image, c.ImagePullPolicy)
				}
			}
		}
	}
	// The controller, snapshotter, driver, metadata sidecar, provisioner, registrar, webhook, and
	// the Lease test's workload image (the Service-based test is not rendered on the node).
	if len(images) < 8 {
		t.Errorf("%d images rendered, want at least 8: %v", len(images), images)
	}
}
