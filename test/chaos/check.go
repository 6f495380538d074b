package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// violation is one broken invariant with the objects concerned.
type violation struct {
	Invariant string   `json:"invariant"`
	Objects   []string `json:"objects"`
	Detail    string   `json:"detail,omitempty"`
}

// state is what the API server and the driver hold, read once.
type state struct {
	snaps    map[string]snapshotv1.VolumeSnapshot
	groups   map[string]bool
	groupOK  map[string]bool
	contents []snapshotv1.VolumeSnapshotContent
	claims   map[string][]string // claim -> finalizers
	deleting []string            // objects with a deletionTimestamp, and their finalizers
	backend  map[string]bool
	failed   []string // snapshots that hold the injected final error
	// unbound are pre-provisioned contents whose snapshot was deleted before any controller
	// bound them (empty ref uid): as the protocol has it they wait for a snapshot of that name,
	// and stay the admin's to delete. They are counted, not violations.
	unbound []string
}

func (e *env) read(ctx context.Context) (*state, error) {
	s := &state{snaps: map[string]snapshotv1.VolumeSnapshot{}, groups: map[string]bool{}, groupOK: map[string]bool{},
		claims: map[string][]string{}, backend: map[string]bool{}}
	vss, err := e.snaps.SnapshotV1().VolumeSnapshots(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, vs := range vss.Items {
		s.snaps[vs.Name] = vs
		s.noteDeleting("VolumeSnapshot "+vs.Name, vs.ObjectMeta)
		if vs.Status != nil && vs.Status.Error != nil && strings.Contains(ptr.Deref(vs.Status.Error.Message, ""), finalMessage) {
			s.failed = append(s.failed, vs.Name)
		}
	}
	vgss, err := e.snaps.GroupsnapshotV1().VolumeGroupSnapshots(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, g := range vgss.Items {
		s.groups[g.Name] = true
		s.groupOK[g.Name] = protocol.Ready(&g)
		s.noteDeleting("VolumeGroupSnapshot "+g.Name, g.ObjectMeta)
	}
	contents, err := e.snaps.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, c := range contents.Items {
		if c.Spec.VolumeSnapshotRef.Namespace == namespace {
			s.contents = append(s.contents, c)
			s.noteDeleting("VolumeSnapshotContent "+c.Name, c.ObjectMeta)
		}
	}
	gcs, err := e.snaps.GroupsnapshotV1().VolumeGroupSnapshotContents().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, c := range gcs.Items {
		s.noteDeleting("VolumeGroupSnapshotContent "+c.Name, c.ObjectMeta)
	}
	pvcs, err := e.kube.CoreV1().PersistentVolumeClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, pvc := range pvcs.Items {
		s.claims[pvc.Name] = pvc.Finalizers
		s.noteDeleting("PersistentVolumeClaim "+pvc.Name, pvc.ObjectMeta)
	}
	backend, err := e.stack.CSI.ListSnapshots(ctx)
	if err != nil {
		return nil, err
	}
	for _, b := range backend {
		s.backend[b.GetSnapshotId()] = true
	}
	return s, nil
}

func (s *state) noteDeleting(what string, meta metav1.ObjectMeta) {
	if meta.DeletionTimestamp != nil {
		s.deleting = append(s.deleting, fmt.Sprintf("%s %v", what, meta.Finalizers))
	}
}

// handle is the backend snapshot a content names, or "".
func handle(c snapshotv1.VolumeSnapshotContent) string {
	if c.Status != nil && c.Status.SnapshotHandle != nil {
		return *c.Status.SnapshotHandle
	}
	return ptr.Deref(c.Spec.Source.SnapshotHandle, "")
}

// check compares the state with what the workload asked for and returns every broken
// invariant; an empty result means converged.
func (w *workload) check(s *state) []violation {
	snaps, groups, deletedClaims := w.expected()
	var out []violation
	add := func(inv, detail string, objects ...string) {
		if len(objects) > 0 {
			sort.Strings(objects)
			out = append(out, violation{Invariant: inv, Objects: objects, Detail: detail})
		}
	}
	var notReady, notDeleted []string
	for name, it := range snaps {
		vs, exists := s.snaps[name]
		switch {
		case it.deleted && exists:
			notDeleted = append(notDeleted, "VolumeSnapshot "+name)
		case !it.deleted && !exists:
			notReady = append(notReady, "VolumeSnapshot "+name+" (missing)")
		case !it.deleted && !readyOrInjected(vs):
			notReady = append(notReady, "VolumeSnapshot "+name+" "+describe(vs))
		}
	}
	for name, it := range groups {
		switch {
		case it.deleted && s.groups[name]:
			notDeleted = append(notDeleted, "VolumeGroupSnapshot "+name)
		case !it.deleted && !s.groupOK[name]:
			notReady = append(notReady, "VolumeGroupSnapshot "+name)
		}
	}
	add("snapshot ready as asked", "", notReady...)
	add("snapshot deleted as asked", "", notDeleted...)
	out = append(out, s.contentChecks()...)
	var claims []string
	for _, c := range deletedClaims {
		if fin, exists := s.claims[c]; exists {
			claims = append(claims, fmt.Sprintf("PersistentVolumeClaim %s %v", c, fin))
		}
	}
	for c, fin := range s.claims {
		if slices.Contains(fin, protocol.PVCAsSourceFinalizer) && !slices.Contains(deletedClaims, c) {
			claims = append(claims, fmt.Sprintf("PersistentVolumeClaim %s %v", c, fin))
		}
	}
	add("claim finalizer released", "", claims...)
	add("no finalizer left on deleted objects", "", s.deleting...)
	return out
}

// contentChecks are the invariants between contents, their snapshots and the backend.
func (s *state) contentChecks() []violation {
	var orphans, lost, leaked []string
	named := map[string]bool{}
	for _, c := range s.contents {
		h := handle(c)
		named[h] = true
		ref := c.Spec.VolumeSnapshotRef
		vs, exists := s.snaps[ref.Name]
		bound := exists && (ref.UID == "" || vs.UID == ref.UID)
		if !exists && ref.UID == "" && c.Spec.Source.SnapshotHandle != nil {
			s.unbound = append(s.unbound, "VolumeSnapshotContent "+c.Name+" of "+ref.Name)
			bound = true
		}
		if !bound && c.Spec.DeletionPolicy != snapshotv1.VolumeSnapshotContentRetain {
			orphans = append(orphans, "VolumeSnapshotContent "+c.Name+" of "+ref.Name)
		}
		if h != "" && !s.backend[h] && c.DeletionTimestamp == nil {
			lost = append(lost, "VolumeSnapshotContent "+c.Name+" names gone "+h)
		}
	}
	for id := range s.backend {
		if !named[id] {
			leaked = append(leaked, "backend snapshot "+id)
		}
	}
	var out []violation
	for _, v := range []violation{
		{Invariant: "no content without its snapshot (except Retain)", Objects: orphans},
		{Invariant: "no backend snapshot loss", Objects: lost},
		{Invariant: "no backend snapshot leak", Objects: leaked},
	} {
		if len(v.Objects) > 0 {
			sort.Strings(v.Objects)
			out = append(out, v)
		}
	}
	return out
}

func readyOrInjected(vs snapshotv1.VolumeSnapshot) bool {
	ready, err := protocol.Report(&vs)
	return ready || err != nil && strings.Contains(ptr.Deref(err.Message, ""), finalMessage)
}

func describe(vs snapshotv1.VolumeSnapshot) string {
	if vs.Status == nil {
		return "(no status)"
	}
	d := fmt.Sprintf("(content %s", ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "-"))
	if vs.Status.Error != nil {
		d += ", error " + ptr.Deref(vs.Status.Error.Message, "")
	}
	return d + ")"
}
