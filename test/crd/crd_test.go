// Package crd tests Shutter's generated CRDs on a real kube-apiserver: every CEL rule, enum and
// required field, the status subresource and the printer columns.
package crd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/shutter-csi/shutter/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// crdCase is one entry of testdata/cases.yaml.
type crdCase struct {
	Name   string          `json:"name"`
	Pre    json.RawMessage `json:"pre,omitempty"`
	Post   json.RawMessage `json:"post"`
	Status bool            `json:"status,omitempty"`
	Error  string          `json:"error,omitempty"`
}

type kindInfo struct {
	resource   schema.GroupVersionResource
	namespaced bool
}

var kinds = map[string]kindInfo{
	"VolumeSnapshot":             {gvr("snapshot", "volumesnapshots"), true},
	"VolumeSnapshotContent":      {gvr("snapshot", "volumesnapshotcontents"), false},
	"VolumeSnapshotClass":        {gvr("snapshot", "volumesnapshotclasses"), false},
	"VolumeGroupSnapshot":        {gvr("groupsnapshot", "volumegroupsnapshots"), true},
	"VolumeGroupSnapshotContent": {gvr("groupsnapshot", "volumegroupsnapshotcontents"), false},
	"VolumeGroupSnapshotClass":   {gvr("groupsnapshot", "volumegroupsnapshotclasses"), false},
	"SnapshotSchedule": {schema.GroupVersionResource{Group: "snapshot.shutter.dev", Version: "v1alpha1",
		Resource: "snapshotschedules"}, true},
}

func gvr(group, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group + ".storage.k8s.io", Version: "v1", Resource: resource}
}

func loadCases(t *testing.T) []crdCase {
	data, err := os.ReadFile("testdata/cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []crdCase
	if err := yaml.UnmarshalStrict(data, &cases); err != nil {
		t.Fatalf("testdata/cases.yaml: %v", err)
	}
	return cases
}

func TestCRDRules(t *testing.T) {
	env := testenv.Start(t)
	testenv.InstallCRDs(t, env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	ns := testenv.Namespace(t, kubernetes.NewForConfigOrDie(env.Config))

	cases := loadCases(t)
	for i, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			err := runCase(context.Background(), dyn, ns, fmt.Sprintf("case-%d", i), tc)
			switch {
			case tc.Error == "" && err != nil:
				t.Fatalf("want accepted, got: %v", err)
			case tc.Error != "" && err == nil:
				t.Fatalf("want rejected with %q, got accepted", tc.Error)
			case tc.Error != "" && !strings.Contains(err.Error(), tc.Error):
				t.Fatalf("want rejected with %q, got: %v", tc.Error, err)
			}
		})
	}
}

// TestCasesCoverEveryKind keeps the case table honest: every kind has cases that are accepted
// and cases that are rejected.
func TestCasesCoverEveryKind(t *testing.T) {
	accepted, rejected := map[string]int{}, map[string]int{}
	for _, tc := range loadCases(t) {
		first := tc.Post
		if tc.Pre != nil {
			first = tc.Pre
		}
		var meta metav1.TypeMeta
		if err := json.Unmarshal(first, &meta); err != nil {
			t.Fatalf("%s: %v", tc.Name, err)
		}
		if tc.Error == "" {
			accepted[meta.Kind]++
		} else {
			rejected[meta.Kind]++
		}
	}
	for kind := range kinds {
		if accepted[kind] == 0 || rejected[kind] == 0 {
			t.Errorf("%s: %d accepted and %d rejected cases; want both", kind, accepted[kind], rejected[kind])
		}
	}
}

// runCase performs tc's writes and returns the error of the last one.
func runCase(ctx context.Context, dyn dynamic.Interface, ns, name string, tc crdCase) error {
	first := tc.Post
	if tc.Pre != nil {
		first = tc.Pre
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(first); err != nil {
		return fmt.Errorf("bad case: %w", err)
	}
	info, ok := kinds[obj.GetKind()]
	if !ok {
		return fmt.Errorf("bad case: unknown kind %q", obj.GetKind())
	}
	client := dynamic.ResourceInterface(dyn.Resource(info.resource))
	obj.SetName(name + "-" + strings.ToLower(ns))
	if info.namespaced {
		client = dyn.Resource(info.resource).Namespace(ns)
		obj.SetNamespace(ns)
	}
	created, err := client.Create(ctx, obj, metav1.CreateOptions{})
	if tc.Pre == nil || err != nil {
		if tc.Pre != nil {
			err = fmt.Errorf("creating pre: %w", err)
		}
		return err
	}
	if status, ok := obj.Object["status"]; ok && tc.Status {
		created.Object["status"] = status
		if created, err = client.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("writing pre status: %w", err)
		}
	}
	post, err := mergePatch(created, tc.Post)
	if err != nil {
		return fmt.Errorf("bad case: %w", err)
	}
	if tc.Status {
		_, err = client.UpdateStatus(ctx, post, metav1.UpdateOptions{})
	} else {
		_, err = client.Update(ctx, post, metav1.UpdateOptions{})
	}
	return err
}

func mergePatch(obj *unstructured.Unstructured, patch []byte) (*unstructured.Unstructured, error) {
	orig, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	merged, err := jsonpatch.MergePatch(orig, patch)
	if err != nil {
		return nil, err
	}
	out := &unstructured.Unstructured{}
	return out, out.UnmarshalJSON(merged)
}
