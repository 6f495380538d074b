package snapshot

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
)

// groupSource is a claim labelled app=db bound to a hostpath volume on node ("" for none).
func groupSource(t *testing.T, claims, volumes cache.Indexer, name, node string) {
	t.Helper()
	pv := localVolume(node)
	pv.Name, pv.Spec.CSI.VolumeHandle = "pv-"+name, "vol-"+name
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv.Name}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	if err := volumes.Add(pv); err != nil {
		t.Fatal(err)
	}
	if err := claims.Add(pvc); err != nil {
		t.Fatal(err)
	}
}

// TestSelectVolumesDistributed: with distributed snapshotting a group's volumes must sit on one
// node, which the selection names (the content's managed-by label); volumes on two nodes are bad
// input with a message naming both, and so is a volume without node affinity. Without it the
// nodes do not matter.
func TestSelectVolumesDistributed(t *testing.T) {
	for _, tc := range []struct {
		name        string
		distributed bool
		nodes       map[string]string // claim -> node of its volume
		wantNode    string
		wantErr     []string
	}{
		{name: "one node", distributed: true, nodes: map[string]string{"a": "node-2", "b": "node-2"}, wantNode: "node-2"},
		{name: "two nodes", distributed: true, nodes: map[string]string{"a": "node-1", "b": "node-2", "c": "node-1"},
			wantErr: []string{"more than one node", "node-1", "node-2", "claim b"}},
		{name: "no node affinity", distributed: true, nodes: map[string]string{"a": "node-1", "b": ""},
			wantErr: []string{"claim b", "node affinity"}},
		{name: "not distributed", nodes: map[string]string{"a": "node-1", "b": "node-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			volumes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			for name, node := range tc.nodes {
				groupSource(t, claims, volumes, name, node)
			}
			k := &groupKind{claims: corelisters.NewPersistentVolumeClaimLister(claims),
				volumes: corelisters.NewPersistentVolumeLister(volumes), distributed: tc.distributed}
			vgs := &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns"},
				Spec: groupv1.VolumeGroupSnapshotSpec{Source: groupv1.VolumeGroupSnapshotSource{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}}
			sel, err := k.selectVolumes(vgs)
			if tc.wantErr != nil {
				for _, want := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("error %v, want it to say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sel.node != tc.wantNode || sel.driver != "d" || len(sel.handles) != len(tc.nodes) || sel.handles[0] != "vol-a" {
				t.Errorf("selection %+v, want node %q, driver d, handles vol-a...", sel, tc.wantNode)
			}
		})
	}
}
