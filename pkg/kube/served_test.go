package kube

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

const testGroupVersion = "groupsnapshot.storage.k8s.io/v1"

func TestMissingResources(t *testing.T) {
	kube := kubefake.NewClientset()
	want := []string{"contents", "classes"}
	if missing, err := MissingResources(kube.Discovery(), testGroupVersion, want); err == nil || !slices.Equal(missing, want) {
		t.Fatalf("nothing served: missing %v, err %v", missing, err)
	}
	kube.Resources = []*metav1.APIResourceList{{GroupVersion: testGroupVersion, APIResources: []metav1.APIResource{{Name: "contents"}}}}
	if missing, err := MissingResources(kube.Discovery(), testGroupVersion, want); err != nil || !slices.Equal(missing, []string{"classes"}) {
		t.Fatalf("one served: missing %v, err %v", missing, err)
	}
	kube.Resources[0].APIResources = append(kube.Resources[0].APIResources, metav1.APIResource{Name: "classes"})
	if missing, err := MissingResources(kube.Discovery(), testGroupVersion, want); err != nil || len(missing) > 0 {
		t.Fatalf("both served: missing %v, err %v", missing, err)
	}
}

// TestWaitServedGivesUp: with Max, the wait backs off and then fails with the missing resources.
func TestWaitServedGivesUp(t *testing.T) {
	kube := kubefake.NewClientset()
	var waits []time.Duration
	err := WaitServed(context.Background(), kube.Discovery(), testGroupVersion, []string{"contents"}, Poll{
		Interval: 10 * time.Millisecond, Factor: 2, Max: 40 * time.Millisecond,
		OnMissing: func(_ []string, _ error, retryIn time.Duration) { waits = append(waits, retryIn) },
	})
	var notServed *NotServedError
	if !errors.As(err, &notServed) || !slices.Equal(notServed.Missing, []string{"contents"}) {
		t.Fatalf("got %v, want a NotServedError", err)
	}
	if !slices.Equal(waits, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}) {
		t.Errorf("waits %v", waits)
	}
}

// TestWaitServedReturnsOnceServed: a resource that appears while the wait polls ends it.
func TestWaitServedReturnsOnceServed(t *testing.T) {
	kube := kubefake.NewClientset()
	looks := 0
	err := WaitServed(context.Background(), kube.Discovery(), testGroupVersion, []string{"contents"}, Poll{
		Interval: time.Millisecond,
		OnMissing: func([]string, error, time.Duration) {
			if looks++; looks == 3 {
				kube.Resources = []*metav1.APIResourceList{{GroupVersion: testGroupVersion, APIResources: []metav1.APIResource{{Name: "contents"}}}}
			}
		},
	})
	if err != nil || looks != 3 {
		t.Fatalf("got %v after %d looks", err, looks)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WaitServed(ctx, kubefake.NewClientset().Discovery(), testGroupVersion, []string{"contents"}, Poll{Interval: time.Hour}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v", err)
	}
}
