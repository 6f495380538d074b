package kube

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shutter-csi/shutter/pkg/controller"
)

// TestWriter: every request is counted, every result remembered, a no-op patch is not sent,
// and deletes carry the uid precondition.
func TestWriter(t *testing.T) {
	ctx := context.Background()
	kube := kubefake.NewClientset()
	var counted []string
	cache := controller.NewWrites[*corev1.PersistentVolumeClaim]()
	w := NewWriter("claim", func(ns string) Client[*corev1.PersistentVolumeClaim] { return kube.CoreV1().PersistentVolumeClaims(ns) },
		cache, WriterOptions{FieldManager: "test", Count: func(kind, write string, err error) {
			counted = append(counted, kind+" "+write+" "+map[bool]string{true: "ok", false: "error"}[err == nil])
		}})
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-a"}}
	created, err := w.Create(ctx, pvc)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cache.Get(controller.KeyOf(pvc)); !ok {
		t.Error("the created object is not remembered")
	}
	if same, err := w.Patch(ctx, created, created.DeepCopy()); err != nil || same != created {
		t.Errorf("no-op patch: %v, %v", same, err)
	}
	if _, err := w.Patch(ctx, created, WithAnnotation(created, "k", "v")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, pvc); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want AlreadyExists through the wrapping", err)
	}
	if err := w.Delete(ctx, created); err != nil {
		t.Fatal(err)
	}
	want := []string{"claim create ok", "claim metadata ok", "claim create error", "claim delete ok"}
	if !slices.Equal(counted, want) {
		t.Errorf("counted %q, want %q", counted, want)
	}
	for _, a := range kube.Actions() {
		switch a := a.(type) {
		case k8stesting.PatchAction:
			if string(a.GetPatch()) != `{"metadata":{"annotations":{"k":"v"},"resourceVersion":""}}` {
				t.Errorf("patch %s", a.GetPatch())
			}
		case k8stesting.DeleteAction:
			if uid := a.GetDeleteOptions().Preconditions; uid == nil || *uid.UID != "uid-a" {
				t.Errorf("delete without the uid precondition: %+v", a.GetDeleteOptions())
			}
		}
	}
}

// TestWriterUpdateMetadata: with UpdateMetadata a metadata change is a read and an update of
// the object read (fields the caller's trimmed copy lacks are kept, a removed annotation is
// gone), counted as one metadata write; a stale copy gets a conflict and nothing is written.
func TestWriterUpdateMetadata(t *testing.T) {
	ctx := context.Background()
	stored := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "7",
		Annotations: map[string]string{"keep": "1", "drop": "2"}}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-a"}}
	kube := kubefake.NewClientset(stored)
	var counted []string
	w := NewWriter("claim", func(ns string) Client[*corev1.PersistentVolumeClaim] { return kube.CoreV1().PersistentVolumeClaims(ns) },
		controller.NewWrites[*corev1.PersistentVolumeClaim](), WriterOptions{UpdateMetadata: true, Count: func(kind, write string, err error) {
			counted = append(counted, write)
		}})
	trimmed := &corev1.PersistentVolumeClaim{ObjectMeta: *stored.ObjectMeta.DeepCopy()}
	updated := WithAnnotation(trimmed, "drop", "")
	updated.Finalizers = []string{"f"}
	got, err := w.Patch(ctx, trimmed, updated)
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.VolumeName != "pv-a" || got.Annotations["keep"] != "1" || got.Annotations["drop"] != "" || !slices.Equal(got.Finalizers, []string{"f"}) {
		t.Errorf("stored %+v", got)
	}
	verbs := []string{}
	for _, a := range kube.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	if !slices.Equal(verbs, []string{"get", "update"}) || !slices.Equal(counted, []string{"metadata"}) {
		t.Errorf("requests %q, counted %q", verbs, counted)
	}
	stale := trimmed.DeepCopy()
	stale.ResourceVersion = "6"
	if _, err := w.Patch(ctx, stale, WithAnnotation(stale, "x", "y")); !apierrors.IsConflict(err) {
		t.Errorf("stale copy: %v, want a conflict", err)
	}
}

// TestWriterPatchFinalizers: a finalizer is added and dropped from a stale copy without a
// conflict and without touching the finalizers others wrote since, in both write modes; a
// change that is already made sends nothing.
func TestWriterPatchFinalizers(t *testing.T) {
	for _, update := range []bool{false, true} {
		ctx := context.Background()
		stored := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "7",
			Finalizers: []string{"kubernetes.io/pvc-protection", "other"}}}
		kube := kubefake.NewClientset(stored)
		var counted []string
		w := NewWriter("claim", func(ns string) Client[*corev1.PersistentVolumeClaim] { return kube.CoreV1().PersistentVolumeClaims(ns) },
			controller.NewWrites[*corev1.PersistentVolumeClaim](), WriterOptions{UpdateMetadata: update, Count: func(kind, write string, err error) {
				counted = append(counted, write)
			}})
		stale := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "5",
			Finalizers: []string{"kubernetes.io/pvc-protection"}}}
		added, err := w.PatchFinalizers(ctx, stale, []string{"mine"}, nil)
		if err != nil {
			t.Fatalf("update=%v: add: %v", update, err)
		}
		if want := []string{"kubernetes.io/pvc-protection", "mine", "other"}; !slices.Equal(sorted(added.Finalizers), want) {
			t.Errorf("update=%v: after add %q, want %q", update, added.Finalizers, want)
		}
		if same, err := w.PatchFinalizers(ctx, added, []string{"mine"}, nil); err != nil || same != added {
			t.Errorf("update=%v: a finalizer already there was written again: %v", update, err)
		}
		dropped, err := w.PatchFinalizers(ctx, stale.DeepCopy(), nil, []string{"kubernetes.io/pvc-protection"})
		if err != nil {
			t.Fatalf("update=%v: drop: %v", update, err)
		}
		if want := []string{"mine", "other"}; !slices.Equal(sorted(dropped.Finalizers), want) {
			t.Errorf("update=%v: after drop %q, want %q", update, dropped.Finalizers, want)
		}
		if want := []string{"metadata", "metadata"}; !slices.Equal(counted, want) {
			t.Errorf("update=%v: counted %q, want %q", update, counted, want)
		}
		for _, a := range kube.Actions() {
			if p, ok := a.(k8stesting.PatchAction); ok && strings.Contains(string(p.GetPatch()), "resourceVersion") {
				t.Errorf("update=%v: the finalizer patch carries a precondition: %s", update, p.GetPatch())
			}
		}
	}
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }
