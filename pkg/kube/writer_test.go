package kube

import (
	"context"
	"slices"
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
