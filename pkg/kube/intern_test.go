package kube

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

const contentJSON = `{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotContent",
"metadata":{"name":"snapcontent-%s","finalizers":["snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"],
"annotations":{"snapshot.storage.kubernetes.io/deletion-secret-name":"secret"},
"managedFields":[{"manager":"snapshot-controller","operation":"Update"}]},
"spec":{"deletionPolicy":"Delete","driver":"hostpath.csi.shutter.dev","source":{"volumeHandle":"vol-1"},
"sourceVolumeMode":"Filesystem","volumeSnapshotClassName":"shutter-hostpath",
"volumeSnapshotRef":{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshot","name":"snap-%s","namespace":"ns","uid":"uid-%s"}}}`

func decodeContent(t *testing.T, id string) *snapshotv1.VolumeSnapshotContent {
	t.Helper()
	var c snapshotv1.VolumeSnapshotContent
	data := []byte(strings.ReplaceAll(contentJSON, "%s", id))
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestTrimAndIntern: two contents decoded apart share the data of their repeated strings after the
// transform, keep every value, and lose their managedFields.
func TestTrimAndIntern(t *testing.T) {
	a, b := decodeContent(t, "a"), decodeContent(t, "b")
	for _, c := range []*snapshotv1.VolumeSnapshotContent{a, b} {
		if _, err := TrimAndIntern(c); err != nil {
			t.Fatal(err)
		}
	}
	same := func(what, x, y string) {
		t.Helper()
		if x != y || unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: %q and %q are not one shared copy", what, x, y)
		}
	}
	same("driver", a.Spec.Driver, b.Spec.Driver)
	same("finalizer", a.Finalizers[0], b.Finalizers[0])
	same("class", *a.Spec.VolumeSnapshotClassName, *b.Spec.VolumeSnapshotClassName)
	same("volume handle", *a.Spec.Source.VolumeHandle, *b.Spec.Source.VolumeHandle)
	same("reference namespace", a.Spec.VolumeSnapshotRef.Namespace, b.Spec.VolumeSnapshotRef.Namespace)
	same("deletion policy", string(a.Spec.DeletionPolicy), string(b.Spec.DeletionPolicy))
	same("volume mode", string(*a.Spec.SourceVolumeMode), string(*b.Spec.SourceVolumeMode))
	same("annotation", a.Annotations["snapshot.storage.kubernetes.io/deletion-secret-name"], b.Annotations["snapshot.storage.kubernetes.io/deletion-secret-name"])
	if a.Name != "snapcontent-a" || a.Spec.VolumeSnapshotRef.Name != "snap-a" || string(a.Spec.VolumeSnapshotRef.UID) != "uid-a" ||
		a.Spec.Driver != "hostpath.csi.shutter.dev" || a.Spec.DeletionPolicy != snapshotv1.VolumeSnapshotContentDelete {
		t.Errorf("values changed: %+v", a)
	}
	if len(a.ManagedFields) != 0 {
		t.Errorf("managedFields kept: %v", a.ManagedFields)
	}
}

// TestInternerStartsAgainWhenFull: the interner holds at most internLimit strings.
func TestInternerStartsAgainWhenFull(t *testing.T) {
	in := &interner{strings: map[string]string{}}
	for i := range internLimit + 10 {
		in.of(fmt.Sprint("claim-", i))
	}
	if n := len(in.strings); n > internLimit {
		t.Errorf("interner holds %d strings, want at most %d", n, internLimit)
	}
}
