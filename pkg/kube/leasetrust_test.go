package kube

import (
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

func TestContentWriterNamespaces(t *testing.T) {
	role := func(name string, rules ...rbacv1.PolicyRule) rbacv1.ClusterRole {
		return rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	}
	rule := func(groups, resources, verbs []string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: groups, Resources: resources, Verbs: verbs}
	}
	bind := func(role string, subjects ...rbacv1.Subject) rbacv1.ClusterRoleBinding {
		return rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role + "-binding"},
			RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: role}, Subjects: subjects}
	}
	sa := func(ns string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "sa", Namespace: ns}
	}
	g := []string{"snapshot.storage.k8s.io"}
	named := rule(g, []string{"volumesnapshotcontents"}, []string{"update"})
	named.ResourceNames = []string{"one"}
	roles := []rbacv1.ClusterRole{
		role("external-snapshotter-runner", rule(g, []string{"volumesnapshotcontents"}, []string{"get", "list"}),
			rule(g, []string{"volumesnapshotcontents/status"}, []string{"update", "patch"})),
		role("snapshot-controller", rule(g, []string{"volumesnapshotcontents"}, []string{"create", "delete"})),
		role("cluster-admin", rule([]string{"*"}, []string{"*"}, []string{"*"})),
		role("reader", rule(g, []string{"volumesnapshotcontents", "volumesnapshotcontents/status"}, []string{"get", "list", "watch"})),
		role("one-content", named),
		role("other-group", rule([]string{"example.com"}, []string{"volumesnapshotcontents"}, []string{"update"})),
		role("snapshots-only", rule(g, []string{"volumesnapshots", "volumesnapshots/status"}, []string{"*"})),
	}
	bindings := []rbacv1.ClusterRoleBinding{
		bind("external-snapshotter-runner", sa("vendor-csi")),
		bind("snapshot-controller", sa("shutter")),
		bind("cluster-admin", rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:masters"},
			rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:ci"},
			rbacv1.Subject{Kind: rbacv1.UserKind, Name: "alice"}),
		bind("reader", sa("tenant-a")),
		bind("one-content", sa("tenant-b")),
		bind("other-group", sa("tenant-c")),
		bind("snapshots-only", sa("tenant-d")),
		bind("missing-role", sa("tenant-e")),
	}
	got := ContentWriterNamespaces(roles, bindings)
	if want := sets.New("vendor-csi", "shutter", "ci"); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", sets.List(got), sets.List(want))
	}
}
