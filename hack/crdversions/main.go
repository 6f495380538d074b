// Command crdversions turns the single-version CRDs that controller-gen writes from client/apis
// into the multi-version CRDs a cluster that already runs the public snapshot CRDs can take as an
// update. hack/update-codegen.sh runs it right after controller-gen; its output is never edited by
// hand.
//
// For groupsnapshot.storage.k8s.io it adds v1beta2 (the storage version, the same shape as v1) and
// v1beta1 (served, deprecated; VolumeGroupSnapshotContent status in the v1beta1 shape). For
// snapshot.storage.k8s.io it adds v1beta1 with served and storage false, so clusters whose
// status.storedVersions still lists v1beta1 accept the update. Every CRD gets conversion strategy
// None; the Helm chart switches the group CRDs to the conversion webhook when it runs one.
// Shutter's own group, snapshot.shutter.dev, and changed block tracking's, cbt.storage.k8s.io
// (public since v1beta1), have only the version they are generated with and are left as they are.
//
// Usage: go run ./hack/crdversions <crd-dir>
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

const (
	snapshotGroup      = "snapshot.storage.k8s.io"
	groupSnapshotGroup = "groupsnapshot.storage.k8s.io"
	shutterGroup       = "snapshot.shutter.dev"
	cbtGroup           = "cbt.storage.k8s.io"
	contentKind        = "VolumeGroupSnapshotContent"
)

type obj = map[string]any

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdversions <crd-dir>")
		os.Exit(2)
	}
	files, err := filepath.Glob(filepath.Join(os.Args[1], "*.yaml"))
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("no CRDs in %s", os.Args[1])
	}
	for _, f := range files {
		if err != nil {
			break
		}
		err = rewrite(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "crdversions: %v\n", err)
		os.Exit(1)
	}
}

// rewrite replaces one CRD file with its multi-version form.
func rewrite(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	crd := obj{}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := addVersions(crd); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(append([]byte("---\n"), bytes.TrimSpace(out)...), '\n'), 0o644)
}

// addVersions adds the older versions of the CRD's group next to the generated v1.
func addVersions(crd obj) error {
	spec, _ := crd["spec"].(obj)
	if spec["group"] == shutterGroup || spec["group"] == cbtGroup {
		return nil
	}
	versions, _ := spec["versions"].([]any)
	if len(versions) != 1 {
		return fmt.Errorf("want exactly the generated v1, found %d versions", len(versions))
	}
	v1, _ := versions[0].(obj)
	if v1["name"] != "v1" {
		return fmt.Errorf("want the generated version to be v1, found %v", v1["name"])
	}
	names, _ := spec["names"].(obj)
	kind, _ := names["kind"].(string)
	group, _ := spec["group"].(string)
	switch group {
	case groupSnapshotGroup:
		v1["storage"] = false
		v1beta2 := deepCopy(v1)
		v1beta2["name"], v1beta2["storage"] = "v1beta2", true
		v1beta1 := deprecated(deepCopy(v1), group, kind)
		v1beta1["served"] = true
		if kind == contentKind {
			if err := v1beta1ContentStatus(v1beta1); err != nil {
				return err
			}
		}
		spec["versions"] = []any{v1, v1beta2, v1beta1}
	case snapshotGroup:
		v1beta1 := deprecated(deepCopy(v1), group, kind)
		v1beta1["served"] = false
		spec["versions"] = []any{v1, v1beta1}
	default:
		return fmt.Errorf("unknown group %q", group)
	}
	spec["conversion"] = obj{"strategy": "None"}
	return nil
}

// deprecated turns a copy of v1 into a v1beta1 that is marked deprecated.
func deprecated(v obj, group, kind string) obj {
	v["name"], v["storage"] = "v1beta1", false
	v["deprecated"] = true
	v["deprecationWarning"] = fmt.Sprintf("%s/v1beta1 %s is deprecated; use %s/v1 %s", group, kind, group, kind)
	return v
}

// v1beta1ContentStatus rewrites the status schema of a v1beta1 VolumeGroupSnapshotContent:
// creationTime is Unix nanoseconds, and volumeSnapshotHandlePairList holds (volume, snapshot)
// handle pairs where v1 has volumeSnapshotInfoList.
func v1beta1ContentStatus(v obj) error {
	props, err := lookup(v, "schema", "openAPIV3Schema", "properties", "status", "properties")
	if err != nil {
		return err
	}
	if _, ok := props["volumeSnapshotInfoList"]; !ok {
		return fmt.Errorf("v1 status has no volumeSnapshotInfoList")
	}
	delete(props, "volumeSnapshotInfoList")
	props["creationTime"] = obj{
		"description": "creationTime is when the storage system took the group snapshot, in nanoseconds since the Unix epoch; unknown when absent.",
		"format":      "int64",
		"type":        "integer",
	}
	handle := func(what string) obj {
		return obj{"description": what, "type": "string"}
	}
	props["volumeSnapshotHandlePairList"] = obj{
		"description": "volumeSnapshotHandlePairList pairs every member's volume handle with its snapshot handle.",
		"type":        "array",
		"items": obj{
			"description": "A volume handle and the handle of its snapshot in the group.",
			"type":        "object",
			"required":    []any{"snapshotHandle", "volumeHandle"},
			"properties": obj{
				"volumeHandle":   handle("volumeHandle is the CSI volume_id of the volume the snapshot was taken of."),
				"snapshotHandle": handle("snapshotHandle is the CSI snapshot_id of the member snapshot."),
			},
		},
	}
	return nil
}

// lookup walks nested maps by key.
func lookup(m obj, keys ...string) (obj, error) {
	for _, k := range keys {
		next, ok := m[k].(obj)
		if !ok {
			return nil, fmt.Errorf("schema has no %q", k)
		}
		m = next
	}
	return m, nil
}

// deepCopy copies a decoded YAML tree.
func deepCopy(v obj) obj {
	return copyValue(v).(obj)
}

func copyValue(v any) any {
	switch v := v.(type) {
	case obj:
		out := make(obj, len(v))
		for k, e := range v {
			out[k] = copyValue(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = copyValue(e)
		}
		return out
	default:
		return v
	}
}
