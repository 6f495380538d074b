package kube

import (
	"sync"

	corev1 "k8s.io/api/core/v1"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
)

// TrimAndIntern is controller.TrimMeta followed by InternSnapshot: the informer transform for
// snapshots and contents.
func TrimAndIntern(obj any) (any, error) {
	out, err := controller.TrimMeta(obj)
	if err != nil {
		return out, err
	}
	InternSnapshot(out)
	return out, nil
}

// InternSnapshot makes the strings that repeat across VolumeSnapshots and
// VolumeSnapshotContents share one copy each: kind and API version, namespace, finalizers,
// annotations, the claim, class, driver, deletion policy, volume mode and volume handle. Each
// decoded object otherwise holds its own copy of every one of them, a quarter of a cached
// content's memory; with 50,000 of them that is tens of MiB. Other objects are left alone.
func InternSnapshot(obj any) {
	switch o := obj.(type) {
	case *snapshotv1.VolumeSnapshot:
		internMeta(&o.TypeMeta.APIVersion, &o.TypeMeta.Kind, &o.Namespace, o.Finalizers, &o.Annotations)
		internPtr(o.Spec.Source.PersistentVolumeClaimName)
		internPtr(o.Spec.VolumeSnapshotClassName)
	case *snapshotv1.VolumeSnapshotContent:
		internMeta(&o.TypeMeta.APIVersion, &o.TypeMeta.Kind, &o.Namespace, o.Finalizers, &o.Annotations)
		s := &o.Spec
		intern(&s.Driver)
		s.DeletionPolicy = snapshotv1.DeletionPolicy(shared.of(string(s.DeletionPolicy)))
		internPtr(s.VolumeSnapshotClassName)
		internPtr(s.Source.VolumeHandle)
		if s.SourceVolumeMode != nil {
			mode := corev1.PersistentVolumeMode(shared.of(string(*s.SourceVolumeMode)))
			s.SourceVolumeMode = &mode
		}
		internRef(&s.VolumeSnapshotRef)
	}
}

func internMeta(apiVersion, kind, namespace *string, finalizers []string, annotations *map[string]string) {
	intern(apiVersion)
	intern(kind)
	intern(namespace)
	for i := range finalizers {
		intern(&finalizers[i])
	}
	if len(*annotations) == 0 {
		return
	}
	copied := make(map[string]string, len(*annotations))
	for k, v := range *annotations {
		copied[shared.of(k)] = shared.of(v)
	}
	*annotations = copied
}

func internRef(ref *corev1.ObjectReference) {
	intern(&ref.APIVersion)
	intern(&ref.Kind)
	intern(&ref.Namespace)
}

func intern(s *string) {
	if *s != "" {
		*s = shared.of(*s)
	}
}

func internPtr(s *string) {
	if s != nil {
		intern(s)
	}
}

// internLimit bounds the strings an interner holds: claim names and volume handles come and go,
// and a table that kept every one ever seen would grow for the life of the process. When it is
// full it starts again; objects interned before still share their copies.
const internLimit = 8192

// interner hands out one copy of each string it is given.
type interner struct {
	mu      sync.Mutex
	strings map[string]string
}

// shared is the process's interner.
var shared = &interner{strings: map[string]string{}}

// of returns the interner's copy of s, which becomes that copy if there is none.
func (in *interner) of(s string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if c, ok := in.strings[s]; ok {
		return c
	}
	if len(in.strings) >= internLimit {
		clear(in.strings)
	}
	in.strings[s] = s
	return s
}
