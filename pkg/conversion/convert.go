// Package conversion converts Shutter's custom resources between the API versions their CRDs
// serve, for the CRD conversion webhook (cmd/snapshot-conversion-webhook).
//
// Invariants:
//   - v1 is the hub. groupsnapshot.storage.k8s.io v1beta2 has the shape of v1, and so do
//     v1beta1 VolumeGroupSnapshot and VolumeGroupSnapshotClass, and snapshot.storage.k8s.io
//     v1beta1: converting them only changes apiVersion.
//   - Only v1beta1 VolumeGroupSnapshotContent differs: status.creationTime is Unix nanoseconds
//     (v1: an RFC 3339 string, written with nanoseconds so nothing is lost) and
//     status.volumeSnapshotHandlePairList holds (volumeHandle, snapshotHandle) pairs where v1 has
//     status.volumeSnapshotInfoList.
//   - Round trips are lossless: what a pair cannot hold of an info list (per-member creationTime,
//     readyToUse, restoreSize, a missing handle) goes into the InfoListAnnotation of the v1beta1
//     object, and converting back restores the list from it as long as the pairs still match it.
//   - Fields this package does not know are copied unchanged; the API server prunes by schema.
package conversion

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// SnapshotGroup is the API group of VolumeSnapshots and their contents and classes.
	SnapshotGroup = "snapshot.storage.k8s.io"
	// GroupSnapshotGroup is the API group of VolumeGroupSnapshots and their contents and classes.
	GroupSnapshotGroup = "groupsnapshot.storage.k8s.io"

	// InfoListAnnotation holds, on a v1beta1 VolumeGroupSnapshotContent converted from v1, the
	// JSON of the v1 status.volumeSnapshotInfoList when the pair list cannot hold all of it.
	InfoListAnnotation = "groupsnapshot.shutter.dev/v1-volume-snapshot-info-list"

	contentKind = "VolumeGroupSnapshotContent"
	infoList    = "volumeSnapshotInfoList"
	pairList    = "volumeSnapshotHandlePairList"
)

// versions lists the versions each group serves or once served.
var versions = map[string][]string{
	SnapshotGroup:      {"v1", "v1beta1"},
	GroupSnapshotGroup: {"v1", "v1beta2", "v1beta1"},
}

// Convert returns a copy of obj in the desired apiVersion. It fails for groups, kinds or
// versions it does not know and for objects whose fields do not have the types their version
// declares.
func Convert(obj *unstructured.Unstructured, desiredAPIVersion string) (*unstructured.Unstructured, error) {
	from, err := schema.ParseGroupVersion(obj.GetAPIVersion())
	if err != nil {
		return nil, err
	}
	to, err := schema.ParseGroupVersion(desiredAPIVersion)
	if err != nil {
		return nil, err
	}
	if from.Group != to.Group {
		return nil, fmt.Errorf("cannot convert %s to another group, %s", from, to)
	}
	if !known(from) || !known(to) {
		return nil, fmt.Errorf("cannot convert from %s to %s: unknown version", from, to)
	}
	out := obj.DeepCopy()
	if from.Group == GroupSnapshotGroup && obj.GetKind() == contentKind && from.Version != to.Version {
		switch {
		case from.Version == "v1beta1":
			err = contentFromV1beta1(out)
		case to.Version == "v1beta1":
			err = contentToV1beta1(out)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", contentKind, obj.GetName(), err)
		}
	}
	out.SetAPIVersion(desiredAPIVersion)
	return out, nil
}

func known(gv schema.GroupVersion) bool {
	for _, v := range versions[gv.Group] {
		if v == gv.Version {
			return true
		}
	}
	return false
}

// contentToV1beta1 rewrites a v1 (or v1beta2) VolumeGroupSnapshotContent status into the v1beta1
// shape.
func contentToV1beta1(u *unstructured.Unstructured) error {
	status, ok := u.Object["status"].(map[string]any)
	if !ok {
		return nil
	}
	if s, ok := status["creationTime"].(string); ok {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("status.creationTime: %w", err)
		}
		status["creationTime"] = t.UnixNano()
	}
	raw, found := status[infoList]
	delete(status, infoList)
	annotations := u.GetAnnotations()
	delete(annotations, InfoListAnnotation)
	if found {
		items, ok := raw.([]any)
		if !ok {
			return fmt.Errorf("status.%s is not a list", infoList)
		}
		pairs, lossless, err := toPairs(items)
		if err != nil {
			return err
		}
		status[pairList] = pairs
		if !lossless {
			data, err := json.Marshal(items)
			if err != nil {
				return err
			}
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[InfoListAnnotation] = string(data)
		}
	}
	setAnnotations(u, annotations)
	return nil
}

// contentFromV1beta1 rewrites a v1beta1 VolumeGroupSnapshotContent status into the v1 shape.
func contentFromV1beta1(u *unstructured.Unstructured) error {
	annotations := u.GetAnnotations()
	saved, hasSaved := annotations[InfoListAnnotation]
	delete(annotations, InfoListAnnotation)
	setAnnotations(u, annotations)
	status, ok := u.Object["status"].(map[string]any)
	if !ok {
		return nil
	}
	if v, ok := status["creationTime"]; ok {
		ns, err := toInt64(v)
		if err != nil {
			return fmt.Errorf("status.creationTime: %w", err)
		}
		status["creationTime"] = time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
	}
	raw, found := status[pairList]
	delete(status, pairList)
	if !found {
		return nil
	}
	pairs, ok := raw.([]any)
	if !ok {
		return fmt.Errorf("status.%s is not a list", pairList)
	}
	infos, err := fromPairs(pairs)
	if err != nil {
		return err
	}
	if hasSaved {
		infos = restoreInfos(infos, saved)
	}
	status[infoList] = infos
	return nil
}

// toPairs projects info list items onto handle pairs; lossless is false when an item holds more
// than its two handles.
func toPairs(items []any) (pairs []any, lossless bool, err error) {
	lossless = true
	pairs = make([]any, 0, len(items))
	for i, raw := range items {
		item, ok := raw.(map[string]any)
		if !ok {
			return nil, false, fmt.Errorf("status.%s[%d] is not an object", infoList, i)
		}
		pair := map[string]any{}
		for _, key := range []string{"volumeHandle", "snapshotHandle"} {
			v, ok := item[key].(string)
			if !ok {
				lossless = false
			}
			pair[key] = v
		}
		if len(item) != 2 {
			lossless = false
		}
		pairs = append(pairs, pair)
	}
	return pairs, lossless, nil
}

// fromPairs turns handle pairs into info list items holding only the handles.
func fromPairs(pairs []any) ([]any, error) {
	infos := make([]any, 0, len(pairs))
	for i, raw := range pairs {
		pair, ok := raw.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("status.%s[%d] is not an object", pairList, i)
		}
		info := map[string]any{}
		for _, key := range []string{"volumeHandle", "snapshotHandle"} {
			if v, ok := pair[key]; ok {
				info[key] = v
			}
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// restoreInfos returns the info list saved in the annotation when the current pairs are exactly
// its projection, and infos otherwise: a client of v1beta1 changed the pairs, and they win.
func restoreInfos(infos []any, saved string) []any {
	var items []any
	if err := json.Unmarshal([]byte(saved), &items); err != nil {
		return infos
	}
	pairs, _, err := toPairs(items)
	if err != nil {
		return infos
	}
	projected, err := fromPairs(pairs)
	if err != nil || !reflect.DeepEqual(normalize(projected), normalize(infos)) {
		return infos
	}
	return items
}

// normalize drops empty handles, which a pair must hold but an info item may leave out.
func normalize(items []any) []any {
	out := make([]any, len(items))
	for i, raw := range items {
		item := map[string]any{}
		for k, v := range raw.(map[string]any) {
			if v != "" {
				item[k] = v
			}
		}
		out[i] = item
	}
	return out
}

// toInt64 reads a JSON number decoded by either encoding/json (float64, json.Number) or the
// apimachinery decoder (int64).
func toInt64(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case float64:
		if n != float64(int64(n)) {
			return 0, fmt.Errorf("%v is not an integer", n)
		}
		return int64(n), nil
	case json.Number:
		return strconv.ParseInt(string(n), 10, 64)
	default:
		return 0, fmt.Errorf("%v is not an integer", v)
	}
}

func setAnnotations(u *unstructured.Unstructured, annotations map[string]string) {
	if len(annotations) == 0 {
		unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
		return
	}
	u.SetAnnotations(annotations)
}
