package node

import (
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	cbtv1beta1 "github.com/shutter-csi/shutter/client/apis/snapshotmetadataservice/v1beta1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/changedblocks"
	"github.com/shutter-csi/shutter/test/testenv"
)

// checkSnapshotMetadata calls the chart's snapshot-metadata sidecar from the node, through the
// SnapshotMetadataService the chart wrote (address, generated CA, audience), as a ServiceAccount
// bound to the chart's client ClusterRole. The snapshot is of a filesystem volume, so the call
// goes through the sidecar's checks (token, RBAC, snapshot resolution) to the driver, which
// refuses it; a ServiceAccount without the binding, and a token for another audience, are
// refused by the sidecar.
func checkSnapshotMetadata(t *testing.T, k kube, snapshot string) {
	t.Helper()
	k.run(`apiVersion: v1
kind: ServiceAccount
metadata: {name: backup, namespace: default}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: nobody, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: backup, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: shutter-snapshot-metadata-client}
subjects: [{kind: ServiceAccount, name: backup, namespace: default}]
`, "kubectl", "apply", "-f", "-")
	cfg, err := clientcmd.BuildConfigFromFlags("", k.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kube, snapshots := kubernetes.NewForConfigOrDie(cfg), clientset.NewForConfigOrDie(cfg)
	svc, err := changedblocks.Dial(k.ctx, snapshots, "hostpath.csi.shutter.dev")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	for _, tt := range []struct {
		sa, audience string
		code         codes.Code
		msg          string
	}{
		{"backup", svc.Audience, codes.InvalidArgument, "not a snapshot of a block volume"},
		{"nobody", svc.Audience, codes.PermissionDenied, ""},
		{"backup", "another-audience", codes.Unauthenticated, ""},
	} {
		token, err := changedblocks.Token(k.ctx, kube, "default", tt.sa, tt.audience)
		if err != nil {
			t.Fatal(err)
		}
		err = svc.List(k.ctx, changedblocks.Request{Token: token, Namespace: "default", Snapshot: snapshot},
			func(changedblocks.Batch) error { return nil })
		if st := status.Convert(err); st.Code() != tt.code || !strings.Contains(st.Message(), tt.msg) {
			t.Errorf("%s, audience %s: got %v, want %v %q", tt.sa, tt.audience, err, tt.code, tt.msg)
		}
	}
}

// TestSnapshotMetadataValues renders the chart's snapshot-metadata parts: by default a generated
// Secret whose CA the SnapshotMetadataService carries, with the Service's address and the
// driver's audience, and the sidecar mounting that Secret; on the local node the sidecar listens
// on loopback and is announced on localhost.
func TestSnapshotMetadataValues(t *testing.T) {
	defaults := renderChart(t)
	var secret corev1.Secret
	if !defaults.Decode(t, "Secret/shutter-snapshot-metadata-tls", &secret) {
		t.Fatal("no generated TLS Secret")
	}
	var sms cbtv1beta1.SnapshotMetadataService
	if !defaults.Decode(t, "SnapshotMetadataService/hostpath.csi.shutter.dev", &sms) {
		t.Fatal("no SnapshotMetadataService")
	}
	block, _ := pem.Decode(sms.Spec.CACert)
	if block == nil || string(sms.Spec.CACert) != string(secret.Data["ca.crt"]) || len(secret.Data["tls.key"]) == 0 {
		t.Errorf("SnapshotMetadataService caCert %q, Secret ca.crt %q", sms.Spec.CACert, secret.Data["ca.crt"])
	}
	if sms.Spec.Address != "shutter-snapshot-metadata."+chartNamespace+".svc:50051" || sms.Spec.Audience != "hostpath.csi.shutter.dev-snapshot-metadata" {
		t.Errorf("address %q audience %q", sms.Spec.Address, sms.Spec.Audience)
	}
	sidecarArgs := func(r rendered) []string {
		var s appsv1.StatefulSet
		if !r.Decode(t, "StatefulSet/shutter-hostpath", &s) {
			t.Fatal("no hostpath StatefulSet")
		}
		for _, c := range s.Spec.Template.Spec.Containers {
			if c.Name == "csi-snapshot-metadata" {
				return c.Args
			}
		}
		t.Fatal("no csi-snapshot-metadata container")
		return nil
	}
	if args := strings.Join(sidecarArgs(defaults), " "); !strings.Contains(args, "--tls-cert=/tls/tls.crt") ||
		!strings.Contains(args, "--listen-address=$(POD_IP)") || !strings.Contains(args, "--http-endpoint=[$(POD_IP)]:8082") {
		t.Errorf("sidecar args %s", args)
	}
	local := renderChart(t, "-f", filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter", "ci", "local-node-values.yaml"),
		"--set", "global.kubernetesServicePort=6443")
	if args := strings.Join(sidecarArgs(local), " "); !strings.Contains(args, "--listen-address=127.0.0.1") || !strings.Contains(args, "--http-endpoint=127.0.0.1:8082") {
		t.Errorf("local node sidecar args %s", args)
	}
	if !local.Decode(t, "SnapshotMetadataService/hostpath.csi.shutter.dev", &sms) || sms.Spec.Address != "localhost:50051" {
		t.Errorf("local node address %q", sms.Spec.Address)
	}
}
