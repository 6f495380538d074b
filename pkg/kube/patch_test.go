package kube

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMergePatchHasPrecondition(t *testing.T) {
	old := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "s", ResourceVersion: "42", Finalizers: []string{"a"}}}
	updated := old.DeepCopy()
	updated.Finalizers = []string{"a", "b"}
	data, err := MergePatch(old, updated)
	if err != nil {
		t.Fatal(err)
	}
	var patch struct {
		Metadata struct {
			ResourceVersion string   `json:"resourceVersion"`
			Finalizers      []string `json:"finalizers"`
		} `json:"metadata"`
		Spec any `json:"spec"`
	}
	if err := json.Unmarshal(data, &patch); err != nil {
		t.Fatal(err)
	}
	if patch.Metadata.ResourceVersion != "42" || !slices.Equal(patch.Metadata.Finalizers, []string{"a", "b"}) || patch.Spec != nil {
		t.Errorf("patch %s", data)
	}
	if data, err := MergePatch(old, old.DeepCopy()); err != nil || data != nil {
		t.Errorf("no change: patch %s, %v", data, err)
	}
}

func TestWithFinalizers(t *testing.T) {
	got, changed := WithFinalizers([]string{"a", "b", "c"}, []string{"d", "a"}, []string{"b"})
	if !changed || !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Errorf("got %v %v", got, changed)
	}
	if _, changed := WithFinalizers([]string{"a"}, []string{"a"}, []string{"x"}); changed {
		t.Error("no-op reported as a change")
	}
}

func TestCopyHelpers(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{"a", "b"}}}
	if got := WithoutFinalizer(pvc, "a"); !slices.Equal(got.Finalizers, []string{"b"}) || len(pvc.Finalizers) != 2 || !HasFinalizer(pvc, "a") || HasFinalizer(got, "a") {
		t.Errorf("WithoutFinalizer: %v, original %v", got.Finalizers, pvc.Finalizers)
	}
	with := WithAnnotation(pvc, "k", "v")
	if with.Annotations["k"] != "v" || pvc.Annotations != nil {
		t.Errorf("WithAnnotation: %v, original %v", with.Annotations, pvc.Annotations)
	}
	if without := WithAnnotation(with, "k", ""); len(without.Annotations) != 0 || with.Annotations["k"] != "v" {
		t.Errorf("WithAnnotation removing: %v", without.Annotations)
	}
}
