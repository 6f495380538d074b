package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
)

var crdOnce struct {
	sync.Once
	err error
}

// CRDDir is the folder of the generated CRDs.
func CRDDir() string { return filepath.Join(RepoRoot(), "client", "config", "crd") }

// InstallCRDs creates or updates Shutter's CRDs once per test binary and waits until every one is
// Established.
func InstallCRDs(t testing.TB, cfg *rest.Config) {
	t.Helper()
	crdOnce.Do(func() { crdOnce.err = ApplyCRDs(context.Background(), cfg, CRDDir()) })
	if crdOnce.err != nil {
		t.Fatalf("install CRDs: %v", crdOnce.err)
	}
}

// ApplyCRDs creates or replaces every CRD in dir and waits until all are Established.
func ApplyCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	cs, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		crd, err := readCRD(f)
		if err != nil {
			return err
		}
		if err := applyCRD(ctx, cs, crd); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		if err := waitEstablished(ctx, cs, name); err != nil {
			return err
		}
	}
	return nil
}

func readCRD(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return crd, nil
}

func applyCRD(ctx context.Context, cs apiextensions.Interface, crd *apiextensionsv1.CustomResourceDefinition) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err == nil, err
		}
		old, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		update := crd.DeepCopy()
		update.ResourceVersion = old.ResourceVersion
		_, err = cs.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, update, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
}

func waitEstablished(ctx context.Context, cs apiextensions.Interface, name string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// Namespace creates a namespace with a name derived from the test's and deletes it when the test
// ends.
func Namespace(t testing.TB, cs kubernetes.Interface) string {
	t.Helper()
	prefix := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(prefix, "-") + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// Create creates obj with c, a typed client, and returns the object as stored; the test fails
// on an error.
func Create[T any](t testing.TB, c interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
}, obj T) T {
	t.Helper()
	created, err := c.Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %T: %v", obj, err)
	}
	return created
}

// CreateGroupSnapshot creates the VolumeGroupSnapshot name of the claims in ns that carry labels.
func CreateGroupSnapshot(t testing.TB, cs clientset.Interface, ns, name string, labels map[string]string) *groupv1.VolumeGroupSnapshot {
	t.Helper()
	return Create(t, cs.GroupsnapshotV1().VolumeGroupSnapshots(ns), &groupv1.VolumeGroupSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       groupv1.VolumeGroupSnapshotSpec{Source: groupv1.VolumeGroupSnapshotSource{Selector: &metav1.LabelSelector{MatchLabels: labels}}},
	})
}
