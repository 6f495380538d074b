// Package dropin proves that Shutter's snapshot-controller and csi-snapshotter are drop-in
// replacements for the upstream images of the same names (kubernetes-csi/external-snapshotter):
// started as processes on a local control plane with the tokens of upstream's own ServiceAccounts
// and RBAC (read from the pinned upstream module, not copied), with command lines copied from
// public charts and operators (testdata/corpus.yaml), they take, restore and delete snapshots and
// group snapshots, serve upstream's metric names and labels, and log JSON when asked.
package dropin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

// The upstream release whose RBAC the components run with: its module is downloaded with the Go
// toolchain (into the module cache) and its deploy/kubernetes files are read from there.
const (
	upstreamModule  = "github.com/kubernetes-csi/external-snapshotter/v8"
	upstreamVersion = "v8.7.0"
	controllerRBAC  = "deploy/kubernetes/snapshot-controller/rbac-snapshot-controller.yaml"
	sidecarRBAC     = "deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml"
)

// Where upstream's files put the ServiceAccounts (the sidecar's file leaves its namespace to the
// user; its bindings name "default").
const (
	controllerNS, controllerSA = "kube-system", "snapshot-controller"
	sidecarNS, sidecarSA       = "default", "csi-snapshotter"
	driver                     = stack.DefaultDriverName
	volumeSize                 = 8 << 20
	readyTimeout               = 90 * time.Second
)

var suite struct {
	once sync.Once
	err  error
	dir  string
	bin  string
	env  *testenv.Env
	kube kubernetes.Interface
	snap clientset.Interface
	// kubeconfigs of the two ServiceAccounts.
	controllerKC, sidecarKC string
	driver                  *stack.Process
	csi                     *stack.CSI
	socket                  string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if suite.driver != nil {
		suite.driver.Stop(5 * time.Second)
	}
	if suite.csi != nil {
		suite.csi.Close()
	}
	if suite.dir != "" && code == 0 {
		_ = os.RemoveAll(suite.dir)
	} else if suite.dir != "" {
		fmt.Fprintf(os.Stderr, "dropin: logs kept in %s\n", suite.dir)
	}
	testenv.Stop()
	os.Exit(code)
}

// setUp starts the control plane, applies upstream's RBAC, builds the binaries and starts the
// hostpath driver, once per test binary.
func setUp(t *testing.T) {
	t.Helper()
	env := testenv.StartDedicated(t)
	testenv.InstallCRDs(t, env.Config)
	suite.once.Do(func() { suite.err = prepare(env) })
	if suite.err != nil {
		t.Fatalf("set-up: %v", suite.err)
	}
	if err := suite.driver.Exited(); err != nil {
		t.Fatalf("driver: %v", err)
	}
}

func prepare(env *testenv.Env) error {
	ctx := context.Background()
	var err error
	suite.env = env
	if suite.dir, err = os.MkdirTemp("", "shutter-dropin-"); err != nil {
		return err
	}
	suite.bin = filepath.Join(suite.dir, "bin")
	if err := stack.Build(ctx, testenv.RepoRoot(), suite.bin); err != nil {
		return err
	}
	if suite.kube, err = kubernetes.NewForConfig(env.Config); err != nil {
		return err
	}
	if suite.snap, err = clientset.NewForConfig(env.Config); err != nil {
		return err
	}
	if err := applyUpstreamRBAC(ctx); err != nil {
		return err
	}
	suite.controllerKC = filepath.Join(suite.dir, "controller.kubeconfig")
	suite.sidecarKC = filepath.Join(suite.dir, "sidecar.kubeconfig")
	if err := stack.TokenKubeconfig(ctx, env.Config, controllerNS, controllerSA, suite.controllerKC); err != nil {
		return err
	}
	if err := stack.TokenKubeconfig(ctx, env.Config, sidecarNS, sidecarSA, suite.sidecarKC); err != nil {
		return err
	}
	if err := createClasses(ctx); err != nil {
		return err
	}
	return startDriver(ctx)
}

// upstreamDir is the pinned upstream module's folder in the module cache.
func upstreamDir() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", upstreamModule+"@"+upstreamVersion)
	cmd.Dir = os.TempDir() // outside the workspace: the module is no dependency of Shutter's
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", upstreamModule, upstreamVersion, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s", upstreamModule, err, info.Error)
	}
	return info.Dir, nil
}

// applyUpstreamRBAC creates every object of upstream's two RBAC files as they are, and upstream's
// leader-election Role of each component in the other namespaces the corpus elects in (in a pod,
// a component elects in its own namespace, where its chart puts that Role).
func applyUpstreamRBAC(ctx context.Context) error {
	dir, err := upstreamDir()
	if err != nil {
		return err
	}
	for _, f := range []string{controllerRBAC, sidecarRBAC} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		if err := applyRBAC(ctx, data); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	for _, ns := range leaseNamespaces {
		if err := ensureNamespace(ctx, ns); err != nil {
			return err
		}
		for _, sa := range [][2]string{{controllerNS, controllerSA}, {sidecarNS, sidecarSA}} {
			if err := grantLeases(ctx, ns, sa[0], sa[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// leaseNamespaces are the namespaces the corpus and the tests elect leaders in.
var leaseNamespaces = []string{"default", "kube-system", "openshift-cluster-storage-operator"}

func ensureNamespace(ctx context.Context, name string) error {
	_, err := suite.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// applyRBAC creates the ServiceAccounts, roles and bindings of a multi-document YAML file.
func applyRBAC(ctx context.Context, data []byte) error {
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return err
		}
		var err error
		switch meta.Kind {
		case "":
			continue
		case "ServiceAccount":
			err = create[corev1.ServiceAccount](ctx, doc, func(o *corev1.ServiceAccount) error {
				_, err := suite.kube.CoreV1().ServiceAccounts(nsOr(o.Namespace)).Create(ctx, o, metav1.CreateOptions{})
				return err
			})
		case "ClusterRole":
			err = create[rbacv1.ClusterRole](ctx, doc, func(o *rbacv1.ClusterRole) error {
				_, err := suite.kube.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
				return err
			})
		case "ClusterRoleBinding":
			err = create[rbacv1.ClusterRoleBinding](ctx, doc, func(o *rbacv1.ClusterRoleBinding) error {
				_, err := suite.kube.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
				return err
			})
		case "Role":
			err = create[rbacv1.Role](ctx, doc, func(o *rbacv1.Role) error {
				_, err := suite.kube.RbacV1().Roles(nsOr(o.Namespace)).Create(ctx, o, metav1.CreateOptions{})
				return err
			})
		case "RoleBinding":
			err = create[rbacv1.RoleBinding](ctx, doc, func(o *rbacv1.RoleBinding) error {
				for i := range o.Subjects {
					o.Subjects[i].Namespace = nsOr(o.Subjects[i].Namespace)
				}
				_, err := suite.kube.RbacV1().RoleBindings(nsOr(o.Namespace)).Create(ctx, o, metav1.CreateOptions{})
				return err
			})
		default:
			return fmt.Errorf("unexpected kind %s", meta.Kind)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", meta.Kind, err)
		}
	}
	return nil
}

// nsOr is the namespace a namespaced object without one lands in with kubectl apply.
func nsOr(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

func create[T any](ctx context.Context, doc []byte, do func(*T) error) error {
	obj := new(T)
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return err
	}
	if err := do(obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// grantLeases binds upstream's leader-election rules for the ServiceAccount saNS/sa in ns.
func grantLeases(ctx context.Context, ns, saNS, sa string) error {
	name := "dropin-leases-" + sa
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		Verbs: []string{"get", "watch", "list", "delete", "update", "create"}}}}
	if _, err := suite.kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: saNS}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}}
	if _, err := suite.kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// createClasses makes the driver's default snapshot and group snapshot classes.
func createClasses(ctx context.Context) error {
	vsc := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "hostpath",
		Annotations: map[string]string{protocol.AnnDefaultClass: "true"}}, Driver: driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	if _, err := suite.snap.SnapshotV1().VolumeSnapshotClasses().Create(ctx, vsc, metav1.CreateOptions{}); err != nil {
		return err
	}
	vgsc := &groupv1.VolumeGroupSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "hostpath",
		Annotations: map[string]string{protocol.AnnGroupDefaultClass: "true"}}, Driver: driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	_, err := suite.snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().Create(ctx, vgsc, metav1.CreateOptions{})
	return err
}

func startDriver(ctx context.Context) error {
	suite.socket = filepath.Join(suite.dir, "csi.sock")
	data := filepath.Join(suite.dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	suite.driver = &stack.Process{Name: "hostpath-driver", Path: filepath.Join(suite.bin, "hostpath-driver"), Dir: suite.dir,
		Args: []string{"--endpoint=unix://" + suite.socket, "--nodeid=dropin", "--drivername=" + driver, "--datadir=" + data, "--fsync=false"}}
	if err := suite.driver.Start(); err != nil {
		return err
	}
	var err error
	if suite.csi, err = stack.DialCSI(suite.socket, data); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for suite.csi.Probe(ctx) != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("driver does not answer:\n%s", suite.driver.Tail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// component is a Shutter binary started by a test, stopped when the test ends.
func component(t *testing.T, binary, name string, args ...string) *stack.Process {
	t.Helper()
	p := &stack.Process{Name: name, Path: filepath.Join(suite.bin, binary), Dir: suite.dir, Args: args}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	return p
}

// freeAddress is a free 127.0.0.1 port.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// logLines are the lines p wrote, without the header lines of stack.Process.
func logLines(t *testing.T, p *stack.Process) []string {
	t.Helper()
	data, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if !strings.HasPrefix(l, "=== ") && l != "" {
			out = append(out, l)
		}
	}
	return out
}
