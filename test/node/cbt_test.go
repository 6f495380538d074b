package node

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/changedblocks"
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
