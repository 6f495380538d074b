package conversion

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/out")

// TestGolden converts every testdata input into every other version of its group and compares
// the result with testdata/out/<input>.to-<version>.yaml.
func TestGolden(t *testing.T) {
	for _, in := range inputs(t) {
		obj := load(t, filepath.Join("testdata", in))
		gv, _ := schema.ParseGroupVersion(obj.GetAPIVersion())
		for _, version := range versions[gv.Group] {
			if version == gv.Version {
				continue
			}
			name := strings.TrimSuffix(in, ".yaml") + ".to-" + version + ".yaml"
			t.Run(name, func(t *testing.T) {
				out, err := Convert(obj, gv.Group+"/"+version)
				if err != nil {
					t.Fatal(err)
				}
				got, err := yaml.Marshal(out.Object)
				if err != nil {
					t.Fatal(err)
				}
				golden := filepath.Join("testdata", "out", name)
				if *update {
					if err := os.WriteFile(golden, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test -update to write the golden files)", err)
				}
				if string(got) != string(want) {
					t.Errorf("converted object differs from %s:\n--- got\n%s\n--- want\n%s", golden, got, want)
				}
			})
		}
	}
}

// TestRoundTrip converts every input to every other version of its group and back, and expects
// the input again: nothing representable is lost, and v1 -> v1beta1 -> v1 keeps the info list.
// Only groupcontent-v1beta1-edited, whose pairs were changed under a saved info list, loses the
// stale list on purpose.
func TestRoundTrip(t *testing.T) {
	for _, in := range inputs(t) {
		if in == "groupcontent-v1beta1-edited.yaml" {
			continue
		}
		obj := load(t, filepath.Join("testdata", in))
		gv, _ := schema.ParseGroupVersion(obj.GetAPIVersion())
		for _, version := range versions[gv.Group] {
			t.Run(in+"/via-"+version, func(t *testing.T) {
				there, err := Convert(obj, gv.Group+"/"+version)
				if err != nil {
					t.Fatal(err)
				}
				back, err := Convert(there, obj.GetAPIVersion())
				if err != nil {
					t.Fatal(err)
				}
				if want, got := canonical(t, obj), canonical(t, back); !reflect.DeepEqual(want, got) {
					t.Errorf("round trip changed the object:\n--- got\n%v\n--- want\n%v", got, want)
				}
			})
		}
	}
}

// TestPairsWin checks that a v1beta1 client's change of the pairs beats a saved info list.
func TestPairsWin(t *testing.T) {
	obj := load(t, filepath.Join("testdata", "groupcontent-v1beta1-edited.yaml"))
	out, err := Convert(obj, "groupsnapshot.storage.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	list, _, _ := unstructured.NestedSlice(out.Object, "status", "volumeSnapshotInfoList")
	want := []any{map[string]any{"volumeHandle": "vol-g", "snapshotHandle": "snap-g2"}}
	if !reflect.DeepEqual(list, want) {
		t.Errorf("info list = %v, want %v", list, want)
	}
	if _, found := out.GetAnnotations()[InfoListAnnotation]; found {
		t.Errorf("the saved info list annotation survived")
	}
}

func TestConvertErrors(t *testing.T) {
	content := func(apiVersion string, status map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apiVersion, "kind": contentKind,
			"metadata": map[string]any{"name": "c"}, "status": status,
		}}
	}
	tests := []struct {
		name string
		obj  *unstructured.Unstructured
		to   string
	}{
		{name: "unknown target version", obj: content("groupsnapshot.storage.k8s.io/v1", nil), to: "groupsnapshot.storage.k8s.io/v1alpha1"},
		{name: "unknown source version", obj: content("groupsnapshot.storage.k8s.io/v2", nil), to: "groupsnapshot.storage.k8s.io/v1"},
		{name: "other group", obj: content("groupsnapshot.storage.k8s.io/v1", nil), to: "snapshot.storage.k8s.io/v1"},
		{name: "unknown group", obj: content("example.com/v1", nil), to: "example.com/v1beta1"},
		{name: "v1beta1 creationTime not a number", obj: content("groupsnapshot.storage.k8s.io/v1beta1",
			map[string]any{"creationTime": "yesterday"}), to: "groupsnapshot.storage.k8s.io/v1"},
		{name: "v1 creationTime not a date", obj: content("groupsnapshot.storage.k8s.io/v1",
			map[string]any{"creationTime": "yesterday"}), to: "groupsnapshot.storage.k8s.io/v1beta1"},
		{name: "pair list not a list", obj: content("groupsnapshot.storage.k8s.io/v1beta1",
			map[string]any{"volumeSnapshotHandlePairList": "x"}), to: "groupsnapshot.storage.k8s.io/v1"},
		{name: "info item not an object", obj: content("groupsnapshot.storage.k8s.io/v1",
			map[string]any{"volumeSnapshotInfoList": []any{"x"}}), to: "groupsnapshot.storage.k8s.io/v1beta1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if out, err := Convert(tc.obj, tc.to); err == nil {
				t.Errorf("converted to %v, want an error", out.Object)
			}
		})
	}
}

func inputs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no inputs in testdata: %v", err)
	}
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	return files
}

func load(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err = yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	// The apimachinery decoder keeps integers int64, as the webhook receives them.
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return obj
}

// canonical is obj as plain JSON values (numbers exact), with status.creationTime strings in UTC: a time written
// with another offset comes back as the same instant in UTC.
func canonical(t *testing.T, obj *unstructured.Unstructured) map[string]any {
	t.Helper()
	data, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	if s, ok, _ := unstructured.NestedString(out, "status", "creationTime"); ok {
		if ts, err := time.Parse(time.RFC3339Nano, s); err == nil {
			_ = unstructured.SetNestedField(out, ts.UTC().Format(time.RFC3339Nano), "status", "creationTime")
		}
	}
	return out
}
