package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	rbacclient "k8s.io/client-go/kubernetes/typed/rbac/v1"
)

// A leader-election Lease proves nothing by itself: whoever may write Leases in some namespace
// (any application that elects a leader) can create one named like a csi-snapshotter's or the
// snapshot-controller's and renew it. A Lease tells that such a component runs only in a
// namespace where one can run:
//   - kube-system, where no tenant writes, and the namespaces the operator names;
//   - the namespace of every ServiceAccount that a ClusterRoleBinding lets write
//     VolumeSnapshotContents (create, update or patch them or their status). Every
//     csi-snapshotter and snapshot-controller needs that right; contents are cluster-scoped,
//     so only a ClusterRoleBinding grants it, which no tenant can make. This is how a vendor's
//     sidecar in the vendor's own namespace is seen without naming that namespace anywhere.

// snapshotGroup is the API group of VolumeSnapshotContents.
const snapshotGroup = "snapshot.storage.k8s.io"

// serviceAccountsGroup prefixes the group of every ServiceAccount of a namespace.
const serviceAccountsGroup = "system:serviceaccounts:"

// ContentWriterNamespaces returns the namespaces of the ServiceAccounts that bindings let write
// VolumeSnapshotContents through roles: subjects of kind ServiceAccount, and the groups
// system:serviceaccounts:<namespace>. Rules limited to resourceNames do not count.
func ContentWriterNamespaces(roles []rbacv1.ClusterRole, bindings []rbacv1.ClusterRoleBinding) sets.Set[string] {
	writers := sets.New[string]()
	for _, r := range roles {
		if slices.ContainsFunc(r.Rules, writesContents) {
			writers.Insert(r.Name)
		}
	}
	out := sets.New[string]()
	for _, b := range bindings {
		if b.RoleRef.Kind != "ClusterRole" || !writers.Has(b.RoleRef.Name) {
			continue
		}
		for _, s := range b.Subjects {
			switch {
			case s.Kind == rbacv1.ServiceAccountKind && s.Namespace != "":
				out.Insert(s.Namespace)
			case s.Kind == rbacv1.GroupKind && strings.HasPrefix(s.Name, serviceAccountsGroup):
				out.Insert(strings.TrimPrefix(s.Name, serviceAccountsGroup))
			}
		}
	}
	return out
}

// writesContents tells whether rule lets its subjects create or change any VolumeSnapshotContent
// or its status.
func writesContents(rule rbacv1.PolicyRule) bool {
	anyOf := func(list []string, want ...string) bool {
		return slices.ContainsFunc(list, func(v string) bool { return slices.Contains(want, v) })
	}
	return len(rule.ResourceNames) == 0 &&
		anyOf(rule.APIGroups, snapshotGroup, rbacv1.APIGroupAll) &&
		anyOf(rule.Resources, "volumesnapshotcontents", "volumesnapshotcontents/status", "volumesnapshotcontents/*",
			rbacv1.ResourceAll, "*/status") &&
		anyOf(rule.Verbs, "create", "update", "patch", rbacv1.VerbAll)
}

// LeaseNamespaces returns the namespaces whose Leases count: kube-system, extra, and the
// ContentWriterNamespaces of the cluster's ClusterRoles and ClusterRoleBindings. When those
// cannot be read, it returns kube-system and extra with the error.
func LeaseNamespaces(ctx context.Context, rbac rbacclient.RbacV1Interface, extra []string) (sets.Set[string], error) {
	out := sets.New(append([]string{metav1.NamespaceSystem}, extra...)...)
	roles, err := rbac.ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, fmt.Errorf("cannot read ClusterRoles: %w", err)
	}
	bindings, err := rbac.ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, fmt.Errorf("cannot read ClusterRoleBindings: %w", err)
	}
	return out.Union(ContentWriterNamespaces(roles.Items, bindings.Items)), nil
}
