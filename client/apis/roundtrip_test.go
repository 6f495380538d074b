// Package apis_test checks that objects written by existing snapshot tools survive a decode and
// encode through Shutter's types with not one byte of meaning lost.
package apis_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := snapshotv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := groupv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRealWorldObjectsRoundTrip(t *testing.T) {
	s := scheme(t)
	files, _ := filepath.Glob("testdata/*.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata")
	}
	kinds := map[string]bool{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(data), "\n---\n") {
			in, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s #%d: %v", file, i, err)
			}
			var meta struct{ APIVersion, Kind string }
			_ = json.Unmarshal(in, &meta)
			kinds[meta.Kind] = true
			obj, err := s.New(schema.FromAPIVersionAndKind(meta.APIVersion, meta.Kind))
			if err != nil {
				t.Fatalf("%s #%d: %v", file, i, err)
			}
			dec := json.NewDecoder(bytes.NewReader(in))
			dec.DisallowUnknownFields()
			if err := dec.Decode(obj); err != nil {
				t.Fatalf("%s #%d (%s): strict decode: %v", file, i, meta.Kind, err)
			}
			out, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			want, got := exact(t, in), exact(t, out)
			if !reflect.DeepEqual(want, got) {
				t.Errorf("%s #%d (%s) changed in a round trip:\n in: %s\nout: %s", file, i, meta.Kind, in, out)
			}
		}
	}
	for _, kind := range []string{"VolumeSnapshot", "VolumeSnapshotContent", "VolumeSnapshotClass",
		"VolumeGroupSnapshot", "VolumeGroupSnapshotContent", "VolumeGroupSnapshotClass"} {
		if !kinds[kind] {
			t.Errorf("no testdata for %s", kind)
		}
	}
}

// exact decodes JSON keeping numbers as written, so that int64 nanoseconds compare exactly.
func exact(t *testing.T, data []byte) any {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
