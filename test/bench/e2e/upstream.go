package main

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// upstreamRBAC is what upstream's snapshot-controller and csi-snapshotter are granted by their
// own deploy/kubernetes RBAC beyond the chart's: they write with update where Shutter patches.
// The benchmark binds it to the chart's ServiceAccounts on upstream's side only.
var upstreamRBAC = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "update"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch", "create", "update", "patch"}},
	{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots", "volumesnapshotcontents"},
		Verbs: []string{"create", "get", "list", "watch", "update", "patch", "delete"}},
	{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots/status", "volumesnapshotcontents/status"},
		Verbs: []string{"update", "patch"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "watch", "list", "delete", "update", "create"}},
}

const upstreamRole = "bench-upstream-external-snapshotter"

// grantUpstream binds upstreamRBAC to the controller's and the sidecar's ServiceAccounts.
func (b *bench) grantUpstream(ctx context.Context) error {
	rbac := b.kube.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: upstreamRole}, Rules: upstreamRBAC},
		metav1.CreateOptions{}); err != nil {
		return err
	}
	var subjects []rbacv1.Subject
	for _, sa := range []string{b.chart.ControllerServiceAccount(), b.chart.HostpathServiceAccount()} {
		subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: b.chart.Namespace})
	}
	_, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: upstreamRole},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: upstreamRole},
		Subjects: subjects}, metav1.CreateOptions{})
	return err
}
