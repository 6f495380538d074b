package sidecar

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
)

func TestGroupsServed(t *testing.T) {
	kube := kubefake.NewClientset()
	s := &sidecar{kube: kube}
	if s.groupsServed() {
		t.Fatal("no group API is served, yet groupsServed says so")
	}
	kube.Resources = []*metav1.APIResourceList{{GroupVersion: groupv1.SchemeGroupVersion.String(), APIResources: []metav1.APIResource{
		{Name: "volumegroupsnapshotcontents"},
	}}}
	if s.groupsServed() {
		t.Fatal("the class kind is missing, yet groupsServed says so")
	}
	kube.Resources[0].APIResources = append(kube.Resources[0].APIResources, metav1.APIResource{Name: "volumegroupsnapshotclasses"})
	if !s.groupsServed() {
		t.Fatal("both kinds are served")
	}
}
