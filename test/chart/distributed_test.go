package chart

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// container returns the named container of spec, failing the test without it.
func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("no container %s", name)
	}
	return spec.Containers[i]
}

// fieldEnv reports whether c sets name from the pod field path.
func fieldEnv(c corev1.Container, name, path string) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == path
	})
}

// wantArgs fails for every argument of want that c lacks and every one of unwanted it has.
func wantArgs(t *testing.T, c corev1.Container, want, unwanted []string) {
	t.Helper()
	for _, a := range want {
		if !slices.Contains(c.Args, a) {
			t.Errorf("%s: args %q lack %s", c.Name, c.Args, a)
		}
	}
	for _, a := range unwanted {
		if slices.ContainsFunc(c.Args, func(got string) bool { return strings.HasPrefix(got, a) }) {
			t.Errorf("%s: args %q hold %s", c.Name, c.Args, a)
		}
	}
}

// TestDistributedMode: hostpath.mode distributed runs the driver as a DaemonSet with its
// topology on, csi-snapshotter and csi-provisioner beside it for their node only (the
// provisioner publishing CSIStorageCapacity, owned by its pod, with the Role for it), the
// CSIDriver telling the scheduler to read capacities, and the controller labelling contents
// with their node and not waiting for a sidecar Lease that node sidecars do not hold; no
// snapshot-metadata sidecar (its one Service cannot reach the node holding a snapshot) and no
// Lease Role or Lease test for the sidecar.
func TestDistributedMode(t *testing.T) {
	docs := everything(t, "--set", "hostpath.mode=distributed")
	for _, key := range []string{"StatefulSet/shutter-hostpath", "Role/shutter-hostpath-snapshotter-lease",
		"Service/shutter-snapshot-metadata", "Secret/shutter-snapshot-metadata-tls"} {
		if _, ok := docs[key]; ok {
			t.Errorf("%s rendered in distributed mode", key)
		}
	}
	var ds appsv1.DaemonSet
	if !docs.Decode(t, "DaemonSet/shutter-hostpath", &ds) {
		t.Fatal("no hostpath DaemonSet")
	}
	spec := ds.Spec.Template.Spec
	if slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "csi-snapshot-metadata" }) {
		t.Error("the snapshot-metadata sidecar runs in distributed mode")
	}
	wantArgs(t, container(t, spec, "hostpath-driver"), []string{"--enable-topology", "--nodeid=$(NODE_NAME)", "--enable-snapshot-metadata=false"}, nil)
	snapshotter := container(t, spec, "csi-snapshotter")
	wantArgs(t, snapshotter, []string{"--node-deployment"}, []string{"--leader-election"})
	provisioner := container(t, spec, "csi-provisioner")
	wantArgs(t, provisioner, []string{"--node-deployment=true", "--enable-capacity", "--capacity-ownerref-level=0", "--strict-topology"}, nil)
	for _, c := range []corev1.Container{snapshotter, provisioner} {
		if !fieldEnv(c, "NODE_NAME", "spec.nodeName") {
			t.Errorf("%s: no NODE_NAME from spec.nodeName", c.Name)
		}
	}
	if !fieldEnv(provisioner, "POD_NAME", "metadata.name") || !fieldEnv(provisioner, "NAMESPACE", "metadata.namespace") {
		t.Errorf("csi-provisioner env %v: no POD_NAME and NAMESPACE for the capacities' owner", provisioner.Env)
	}

	var driver storagev1.CSIDriver
	docs.Decode(t, "CSIDriver/hostpath.csi.shutter.dev", &driver)
	if driver.Spec.StorageCapacity == nil || !*driver.Spec.StorageCapacity {
		t.Errorf("CSIDriver storageCapacity %v, want true", driver.Spec.StorageCapacity)
	}
	var role rbacv1.Role
	if !docs.Decode(t, "Role/shutter-hostpath-provisioner-capacity", &role) {
		t.Fatal("no Role for the CSIStorageCapacities")
	}
	if r := role.Rules[0]; !slices.Equal(r.Resources, []string{"csistoragecapacities"}) || !slices.Contains(r.Verbs, "create") {
		t.Errorf("capacity rule %+v", r)
	}
	if _, ok := docs["RoleBinding/shutter-hostpath-provisioner-capacity"]; !ok {
		t.Error("no RoleBinding for the CSIStorageCapacities")
	}

	var d appsv1.Deployment
	docs.Decode(t, "Deployment/shutter-snapshot-controller", &d)
	wantArgs(t, container(t, d.Spec.Template.Spec, "snapshot-controller"),
		[]string{"--enable-distributed-snapshotting=true", "--sidecar-liveness-threshold=0"}, []string{"--sidecar-lease-namespaces"})
	if leases, ok := docs["Pod/shutter-test-leases"]; !ok || strings.Contains(string(leases), "external-snapshotter-leader") {
		t.Errorf("the Lease test is missing or checks the sidecar's Lease (rendered %t)", ok)
	}
}

// TestSingleModeDefault: by default the driver is one StatefulSet pod, without topology or
// capacity, and the controller does not label contents with nodes.
func TestSingleModeDefault(t *testing.T) {
	docs := everything(t)
	var s appsv1.StatefulSet
	if !docs.Decode(t, "StatefulSet/shutter-hostpath", &s) {
		t.Fatal("no hostpath StatefulSet")
	}
	if _, ok := docs["DaemonSet/shutter-hostpath"]; ok {
		t.Error("a DaemonSet by default")
	}
	spec := s.Spec.Template.Spec
	wantArgs(t, container(t, spec, "hostpath-driver"), nil, []string{"--enable-topology"})
	wantArgs(t, container(t, spec, "csi-provisioner"), []string{"--node-deployment=false"}, []string{"--enable-capacity"})
	wantArgs(t, container(t, spec, "csi-snapshotter"), []string{"--leader-election"}, []string{"--node-deployment"})
	var d appsv1.Deployment
	docs.Decode(t, "Deployment/shutter-snapshot-controller", &d)
	wantArgs(t, container(t, d.Spec.Template.Spec, "snapshot-controller"), []string{"--enable-distributed-snapshotting=false"}, nil)
}
