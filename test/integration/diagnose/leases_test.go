package diagnose

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shutter-csi/shutter/pkg/diagnose"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/testenv"
)

// TestForgedLeases: a dead sidecar stays dead in describe and stuck whatever Leases named like
// its own say: a fresh one in a tenant's namespace, where no csi-snapshotter can run, and one
// renewed in 2099 where the sidecar runs. A sidecar in a vendor's namespace, whose ServiceAccount
// an aggregated ClusterRole lets write contents, is seen without naming the namespace.
func TestForgedLeases(t *testing.T) {
	f := newFixture(t)
	f.waitingForSidecar()
	lease := protocol.SidecarLeaseName(f.driver)

	tenant := testenv.Namespace(t, f.kube)
	f.leaseIn(tenant, lease, time.Now())
	f.leaseIn(tenant, protocol.ControllerLeaseName, time.Now())
	f.leaseIn(f.ns, "external-snapshotter-leader-"+sanitize(f.driver), time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	want := fmt.Sprintf("waiting for csi-snapshotter of driver %s: no sidecar for %s holds a live Lease: %s/external-snapshotter-leader-%s claims a renewal in the future",
		f.driver, f.driver, f.ns, sanitize(f.driver))
	text := f.expect("VolumeSnapshot", "snapshot", "snap", diagnose.RuleNoSidecar, want)
	mustContain(t, text, "Driver "+f.driver+" [NoSidecar]",
		"not counted: Lease "+tenant+"/"+lease+", in a namespace where the component cannot run",
		"Controller snapshot-controller [NoLease]", "not counted: Lease "+tenant+"/"+protocol.ControllerLeaseName)

	// Named by the operator, the tenant's namespace counts (the flag says so, not the Lease).
	if _, d := f.describe("snapshot", "snap"); d.Rule != diagnose.RuleNoSidecar {
		t.Errorf("without --lease-namespaces: %s", d.Rule)
	}
	text = f.run("describe", "snapshot", "snap", "--lease-namespaces", tenant)
	mustContain(t, text, "Driver "+f.driver+" [SidecarLive]")

	// A vendor's sidecar in its own namespace, bound to an aggregated ClusterRole.
	vendor := testenv.Namespace(t, f.kube)
	label := map[string]string{"diag.shutter.dev/aggregate-to-" + vendor: "true"}
	part := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "diag-part-" + vendor, Labels: label},
		Rules: []rbacv1.PolicyRule{contentStatusRule}}
	_, err := f.kube.RbacV1().ClusterRoles().Create(f.ctx, part, metav1.CreateOptions{})
	f.check(err)
	t.Cleanup(func() { _ = f.kube.RbacV1().ClusterRoles().Delete(f.ctx, part.Name, metav1.DeleteOptions{}) })
	role := f.snapshotterRBAC(vendor, nil, label)
	testenv.WaitFor(t, "the aggregated ClusterRole's rules", 30*time.Second, func(ctx context.Context) (*rbacv1.ClusterRole, error) {
		return f.kube.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
	}, func(r *rbacv1.ClusterRole) bool { return r != nil && len(r.Rules) > 0 })
	f.leaseIn(vendor, lease, time.Now())
	_, d := f.describe("snapshot", "snap")
	if d.Rule != diagnose.RuleSidecarWorking {
		t.Errorf("with the vendor's sidecar: %s %q", d.Rule, d.Reason)
	}
}
