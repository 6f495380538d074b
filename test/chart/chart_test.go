// Package chart checks the Helm chart's least privilege: who gets a ServiceAccount token, where
// the HTTP servers listen, the conversion webhook's bounds, the driver's own namespace, and what
// NOTES.txt says about a release namespace the chart could not label (on a real API server).
package chart

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/shutter-csi/shutter/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// namespace is the release namespace of the renders.
const namespace = "shutter-system"

// helm returns the helm binary, building it when the tool cache lacks it.
func helm(t *testing.T) string {
	t.Helper()
	bin, err := testenv.Tools("helm")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(bin, "helm")
}

// everything renders every component, the webhook and both tests included.
func everything(t *testing.T, args ...string) testenv.Rendered {
	t.Helper()
	return testenv.RenderChart(t, helm(t), namespace, append([]string{"--set", "conversionWebhook.enabled=true",
		"--set", "conversionWebhook.certificate.source=secret", "--set", "test.leases.enabled=true",
		"--set", "hostpath.registrar.enabled=true"}, args...)...)
}

// podSpecs returns the pod specs the chart renders, by "Kind/name".
func podSpecs(t *testing.T, docs testenv.Rendered) map[string]corev1.PodSpec {
	t.Helper()
	specs := map[string]corev1.PodSpec{}
	for key := range docs {
		if strings.Count(key, "/") != 1 {
			continue
		}
		switch kind := strings.SplitN(key, "/", 2)[0]; kind {
		case "Deployment":
			var d appsv1.Deployment
			docs.Decode(t, key, &d)
			specs[key] = d.Spec.Template.Spec
		case "StatefulSet":
			var s appsv1.StatefulSet
			docs.Decode(t, key, &s)
			specs[key] = s.Spec.Template.Spec
		case "DaemonSet":
			var d appsv1.DaemonSet
			docs.Decode(t, key, &d)
			specs[key] = d.Spec.Template.Spec
		case "Pod":
			var p corev1.Pod
			docs.Decode(t, key, &p)
			specs[key] = p.Spec
		}
	}
	return specs
}

// TestTokensOnlyWhereTheAPIIsCalled: no pod mounts its ServiceAccount's token into every
// container; a projected token is mounted into the containers that call the API server, and
// into no other (the privileged driver, the registrar, the health test's wget), in both of the
// driver's modes.
func TestTokensOnlyWhereTheAPIIsCalled(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		wantToken []string
	}{
		{name: "single", wantToken: []string{"conversion-webhook", "csi-provisioner", "csi-snapshot-metadata", "csi-snapshotter", "leases", "snapshot-controller"}},
		{name: "distributed", args: []string{"--set", "hostpath.mode=distributed"},
			wantToken: []string{"conversion-webhook", "csi-provisioner", "csi-snapshotter", "leases", "snapshot-controller"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkTokens(t, podSpecs(t, everything(t, tc.args...)), tc.wantToken) })
	}
}

// checkTokens checks that only the containers wantToken name mount a ServiceAccount token.
func checkTokens(t *testing.T, specs map[string]corev1.PodSpec, wantToken []string) {
	t.Helper()
	if len(specs) != 5 {
		t.Errorf("pods %d, want 5 (controller, webhook, hostpath, two tests)", len(specs))
	}
	var got []string
	for key, spec := range specs {
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: automountServiceAccountToken %v, want false", key, spec.AutomountServiceAccountToken)
		}
		for _, c := range spec.Containers {
			if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
			}) {
				got = append(got, c.Name)
			}
		}
		for _, v := range spec.Volumes {
			if v.Projected != nil && v.Name == "kube-api-access" && v.Projected.Sources[0].ServiceAccountToken == nil {
				t.Errorf("%s: kube-api-access holds no token", key)
			}
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, wantToken) {
		t.Errorf("containers with a token %q, want %q", got, wantToken)
	}
}

// TestHTTPServersListenOnThePodIP: the HTTP servers listen on the pod's IP, where the kubelet
// probes and Prometheus scrapes, not on every address; global.listenAddress still chooses one.
func TestHTTPServersListenOnThePodIP(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want map[string][]string // container -> its listen arguments
		env  bool                // POD_IP set in those containers
	}{
		{name: "defaults", env: true, want: map[string][]string{"snapshot-controller": {"--http-endpoint=[$(POD_IP)]:8080"},
			"csi-snapshotter": {"--http-endpoint=[$(POD_IP)]:8081"}, "conversion-webhook": {"--address=$(POD_IP)"},
			"hostpath-driver":       {"--http-endpoint=[$(POD_IP)]:8083"},
			"csi-snapshot-metadata": {"--listen-address=$(POD_IP)", "--http-endpoint=[$(POD_IP)]:8082"}}},
		{name: "listenAddress", args: []string{"--set", "global.listenAddress=127.0.0.1"}, want: map[string][]string{
			"snapshot-controller": {"--http-endpoint=127.0.0.1:8080"}, "csi-snapshotter": {"--http-endpoint=127.0.0.1:8081"},
			"conversion-webhook": {"--address=127.0.0.1"}, "hostpath-driver": {"--http-endpoint=127.0.0.1:8083"},
			"csi-snapshot-metadata": {"--listen-address=127.0.0.1", "--http-endpoint=127.0.0.1:8082"}}},
		{name: "distributed", args: []string{"--set", "hostpath.mode=distributed"}, env: true, want: map[string][]string{
			"snapshot-controller": {"--http-endpoint=[$(POD_IP)]:8080"}, "csi-snapshotter": {"--http-endpoint=[$(POD_IP)]:8081"},
			"conversion-webhook": {"--address=$(POD_IP)"}, "hostpath-driver": {"--http-endpoint=[$(POD_IP)]:8083"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := 0
			for key, spec := range podSpecs(t, everything(t, tc.args...)) {
				for _, c := range spec.Containers {
					var listen []string
					for _, a := range c.Args {
						if strings.HasPrefix(a, "--http-endpoint=") || strings.HasPrefix(a, "--address=") || strings.HasPrefix(a, "--listen-address=") {
							listen = append(listen, a)
						}
					}
					want := tc.want[c.Name]
					if !slices.Equal(listen, want) {
						t.Errorf("%s %s: listens on %q, want %q", key, c.Name, listen, want)
					}
					if want == nil {
						continue
					}
					seen++
					podIP := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
						return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
					})
					if podIP != tc.env {
						t.Errorf("%s %s: POD_IP from status.podIP %t, want %t", key, c.Name, podIP, tc.env)
					}
				}
			}
			if seen != len(tc.want) {
				t.Errorf("found %d of the %d servers", seen, len(tc.want))
			}
		})
	}
}

// TestConversionWebhookBounds: the webhook serves a bounded number and size of conversions at
// once and has a memory limit that holds them (about 2.5 times the bytes in flight, plus its
// own 40 MiB), which the Go runtime is told of.
func TestConversionWebhookBounds(t *testing.T) {
	var d appsv1.Deployment
	if !everything(t).Decode(t, "Deployment/shutter-conversion-webhook", &d) {
		t.Fatal("no webhook Deployment")
	}
	c := d.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--max-requests-inflight=8", "--max-bytes-inflight=67108864"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok || limit.Value() < 5*67108864/2+40<<20 {
		t.Errorf("memory limit %v, want at least 2.5 x 64 MiB + 40 MiB", limit.String())
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory"
	}) {
		t.Errorf("env %v: no GOMEMLIMIT from limits.memory", c.Env)
	}
}

// TestDriverNamespace: with hostpath.namespace the chart creates that namespace for the driver's
// privileged pod alone, labelled to allow it and kept on uninstall, and puts the driver, its
// ServiceAccount, its Lease's Role, its Lease test and its snapshot-metadata Service and
// certificate there; the controller counts its Leases.
func TestDriverNamespace(t *testing.T) {
	docs := everything(t, "--set", "hostpath.namespace=shutter-driver")
	var ns corev1.Namespace
	if !docs.Decode(t, "Namespace/shutter-driver", &ns) {
		t.Fatal("no Namespace shutter-driver")
	}
	for _, label := range []string{"enforce", "audit", "warn"} {
		if v := ns.Labels["pod-security.kubernetes.io/"+label]; v != "privileged" {
			t.Errorf("label pod-security.kubernetes.io/%s=%q, want privileged", label, v)
		}
	}
	if ns.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("annotations %v: not kept on uninstall", ns.Annotations)
	}
	for _, key := range []string{"StatefulSet/shutter-driver/shutter-hostpath", "ServiceAccount/shutter-driver/shutter-hostpath",
		"Role/shutter-driver/shutter-hostpath-snapshotter-lease", "Pod/shutter-driver/shutter-test-leases",
		"Pod/" + namespace + "/shutter-test-leases", "Deployment/" + namespace + "/shutter-snapshot-controller",
		"Service/shutter-driver/shutter-snapshot-metadata", "Secret/shutter-driver/shutter-snapshot-metadata-tls"} {
		if _, ok := docs[key]; !ok {
			t.Errorf("no %s", key)
		}
	}
	var d appsv1.Deployment
	docs.Decode(t, "Deployment/shutter-snapshot-controller", &d)
	if want := "--sidecar-lease-namespaces=shutter-system,shutter-driver"; !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, want) {
		t.Errorf("controller args %q lack %s", d.Spec.Template.Spec.Containers[0].Args, want)
	}
	if _, ok := everything(t)["Namespace/shutter-system"]; ok {
		t.Error("by default the chart renders a Namespace")
	}
}
