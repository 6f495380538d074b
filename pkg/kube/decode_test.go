package kube

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/client/clientset/versioned/scheme"
)

// TestDecodeListMatchesAPIMachinery fills every list kind of the snapshot API with random values
// (every field, nil or not, the API machinery's own fuzzer), encodes it as the API server does,
// and decodes it with DecodeList and with the clients' own decoder: the two objects are equal,
// but for managedFields, which DecodeList leaves empty.
func TestDecodeListMatchesAPIMachinery(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	f := fuzzer.FuzzerFor(metafuzzer.Funcs, rand.NewSource(seed), scheme.Codecs).NumElements(1, 3)
	for _, list := range []runtime.Object{
		&snapshotv1.VolumeSnapshotList{}, &snapshotv1.VolumeSnapshotContentList{}, &snapshotv1.VolumeSnapshotClassList{},
		&groupv1.VolumeGroupSnapshotList{}, &groupv1.VolumeGroupSnapshotContentList{}, &groupv1.VolumeGroupSnapshotClassList{},
	} {
		kind := reflect.TypeOf(list).Elem().Name()
		gvk := findGV(scheme.Scheme.PrioritizedVersionsAllGroups(), kind).WithKind(kind)
		t.Run(kind, func(t *testing.T) {
			for i := range 200 {
				in := list.DeepCopyObject()
				f.Fill(in)
				in.GetObjectKind().SetGroupVersionKind(gvk)
				data, err := json.Marshal(in)
				if err != nil {
					t.Fatal(err)
				}
				want, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, list.DeepCopyObject())
				if err != nil {
					t.Fatalf("the API machinery cannot decode %s: %v", data, err)
				}
				dropManagedFields(t, want)
				got := list.DeepCopyObject()
				if err := DecodeList(data, got); err != nil {
					t.Fatalf("DecodeList: %v\n%s", err, data)
				}
				if !equality.Semantic.DeepEqual(got, want) {
					t.Fatalf("case %d: DecodeList and the API machinery differ on\n%s\ngot  %#v\nwant %#v", i, data, got, want)
				}
			}
		})
	}
}

// TestDecodeListSkipsManagedFieldsOnly decodes a realistic page: managedFields are empty and
// everything else is there.
func TestDecodeListSkipsManagedFieldsOnly(t *testing.T) {
	page := contentPage(t, 3)
	var list snapshotv1.VolumeSnapshotContentList
	if err := DecodeList(page, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 || list.ResourceVersion != "4242" || list.Continue != "next" {
		t.Fatalf("list decoded as %d items, resourceVersion %q, continue %q", len(list.Items), list.ResourceVersion, list.Continue)
	}
	for _, c := range list.Items {
		if c.ManagedFields != nil {
			t.Errorf("%s kept managedFields %v", c.Name, c.ManagedFields)
		}
		if c.Spec.VolumeSnapshotRef.Name == "" || c.Status == nil || c.Status.RestoreSize == nil || !ptr.Deref(c.Status.ReadyToUse, false) || len(c.Finalizers) != 1 {
			t.Errorf("%s decoded as %+v", c.Name, c)
		}
	}
	if err := DecodeList([]byte(`{"items":[{"metadata":{"name":1}}]}`), &list); err == nil {
		t.Error("a name that is a number decoded without an error")
	}
}

// BenchmarkDecodeList decodes a page of 500 ready contents (1.6 KB of JSON each, managedFields
// of a creator, the controller and the sidecar, as the API server sends them) with DecodeList
// and with the API machinery's decoder the typed clients use.
func BenchmarkDecodeList(b *testing.B) {
	page := contentPage(b, ListPageSize)
	b.Run("DecodeList", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		for b.Loop() {
			var list snapshotv1.VolumeSnapshotContentList
			if err := DecodeList(page, &list); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("APIMachinery", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		decoder := scheme.Codecs.UniversalDeserializer()
		for b.Loop() {
			var list snapshotv1.VolumeSnapshotContentList
			if _, _, err := decoder.Decode(page, nil, &list); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func findGV(gvs []schema.GroupVersion, kind string) schema.GroupVersion {
	for _, gv := range gvs {
		if scheme.Scheme.Recognizes(gv.WithKind(kind)) {
			return gv
		}
	}
	panic("no group version for " + kind)
}

// dropManagedFields empties every item's managedFields.
func dropManagedFields(t *testing.T, list runtime.Object) {
	t.Helper()
	if err := meta.EachListItem(list, func(obj runtime.Object) error {
		m, err := meta.Accessor(obj)
		if err == nil {
			m.SetManagedFields(nil)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// contentPage is a page of n ready contents as the API server lists them.
func contentPage(t testing.TB, n int) []byte {
	t.Helper()
	now := metav1.NewTime(time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC))
	fields := func(s string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(s)} }
	list := snapshotv1.VolumeSnapshotContentList{
		TypeMeta: metav1.TypeMeta{APIVersion: "snapshot.storage.k8s.io/v1", Kind: "VolumeSnapshotContentList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "4242", Continue: "next"},
	}
	for i := range n {
		uid := types.UID(fmt.Sprintf("5c1e2d3f-0a1b-4c2d-8e3f-%012d", i))
		list.Items = append(list.Items, snapshotv1.VolumeSnapshotContent{
			TypeMeta: metav1.TypeMeta{APIVersion: "snapshot.storage.k8s.io/v1", Kind: "VolumeSnapshotContent"},
			ObjectMeta: metav1.ObjectMeta{
				Name: "snapcontent-" + string(uid), UID: uid, ResourceVersion: fmt.Sprint(1000 + i), Generation: 1,
				CreationTimestamp: now,
				Finalizers:        []string{"snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"},
				ManagedFields: []metav1.ManagedFieldsEntry{
					{Manager: "snapshot-controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "snapshot.storage.k8s.io/v1", Time: &now, FieldsType: "FieldsV1",
						FieldsV1: fields(`{"f:metadata":{"f:finalizers":{".":{},"v:\"snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection\"":{}}},"f:spec":{".":{},"f:deletionPolicy":{},"f:driver":{},"f:source":{".":{},"f:volumeHandle":{}},"f:sourceVolumeMode":{},"f:volumeSnapshotClassName":{},"f:volumeSnapshotRef":{}}}`)},
					{Manager: "csi-snapshotter", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "snapshot.storage.k8s.io/v1", Time: &now, FieldsType: "FieldsV1",
						FieldsV1: fields(`{"f:metadata":{"f:annotations":{".":{}}}}`)},
					{Manager: "csi-snapshotter", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "snapshot.storage.k8s.io/v1", Time: &now, FieldsType: "FieldsV1", Subresource: "status",
						FieldsV1: fields(`{"f:status":{".":{},"f:creationTime":{},"f:readyToUse":{},"f:restoreSize":{},"f:snapshotHandle":{}}}`)},
				},
			},
			Spec: snapshotv1.VolumeSnapshotContentSpec{
				VolumeSnapshotRef: corev1.ObjectReference{
					Kind: "VolumeSnapshot", APIVersion: "snapshot.storage.k8s.io/v1", Namespace: "bench", Name: fmt.Sprintf("snap-%d", i),
					UID: uid, ResourceVersion: fmt.Sprint(900 + i),
				},
				DeletionPolicy:          snapshotv1.VolumeSnapshotContentDelete,
				Driver:                  "hostpath.csi.shutter.dev",
				Source:                  snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To(fmt.Sprintf("vol-%08d", i))},
				VolumeSnapshotClassName: ptr.To("csi-hostpath-snapclass"),
				SourceVolumeMode:        ptr.To(corev1.PersistentVolumeFilesystem),
			},
			Status: &snapshotv1.VolumeSnapshotContentStatus{
				SnapshotHandle: ptr.To(fmt.Sprintf("snap-%08d-%d", i, i)), CreationTime: ptr.To(now.UnixNano()),
				RestoreSize: ptr.To[int64](1 << 20), ReadyToUse: ptr.To(true),
			},
		})
	}
	data, err := json.Marshal(&list)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
