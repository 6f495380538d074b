package snapshotmetadata

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/shutter-csi/shutter/pkg/changedblocks"
	"github.com/shutter-csi/shutter/pkg/hostpath"
)

// TestChangedBlocksImageVolume is the flow for a filesystem volume that the driver keeps as an
// ext4 image (root and loop devices needed): files written, snapshot A, one rewritten in part,
// one added and one removed, snapshot B. Through the sidecar, A's allocated ranges applied onto
// zeros rebuild the image copy the driver keeps for A, and the delta from A to B is exactly the
// 4 KiB blocks in which the two image copies differ (compared here byte for byte).
func TestChangedBlocksImageVolume(t *testing.T) {
	if os.Getenv(upstreamHostpathEnv) != "" {
		t.Skip("upstream's driver has no image volumes")
	}
	e := start(t, func(o *hostpath.Options) { o.VolumeBacking = hostpath.BackingImage })
	ctx := t.Context()
	vol, root := e.fsVolume(t, e.ns+"-fs")
	writeFile(t, filepath.Join(root, "one"), 300<<10)
	writeFile(t, filepath.Join(root, "two"), 64<<10)
	handleA := e.snapshot(t, "a", vol)
	writeRanges(t, filepath.Join(root, "one"), [][2]int64{{128 << 10, 4096}})
	writeFile(t, filepath.Join(root, "three"), 40<<10)
	if err := os.Remove(filepath.Join(root, "two")); err != nil {
		t.Fatal(err)
	}
	handleB := e.snapshot(t, "b", vol)
	e.serviceAccount(t, "backup", true)

	svc, err := changedblocks.Dial(ctx, e.snapshots, driverName)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	token, err := changedblocks.Token(ctx, e.kube, e.ns, "backup", audience)
	if err != nil {
		t.Fatal(err)
	}
	list := func(req changedblocks.Request) []changedblocks.Batch {
		t.Helper()
		req.Token, req.Namespace = token, e.ns
		var out []changedblocks.Batch
		if err := svc.List(ctx, req, func(b changedblocks.Batch) error { out = append(out, b); return nil }); err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		return out
	}
	imgA := readFile(t, filepath.Join(e.dataDir, "snapshot-images", handleA))
	imgB := readFile(t, filepath.Join(e.dataDir, "snapshot-images", handleB))
	alloc := list(changedblocks.Request{Snapshot: "a"})
	rebuilt := make([]byte, len(imgA))
	for _, b := range alloc {
		if b.Capacity != int64(len(imgA)) || b.Type != "VARIABLE_LENGTH" {
			t.Errorf("message of %s, capacity %d; want VARIABLE_LENGTH, %d", b.Type, b.Capacity, len(imgA))
		}
		for _, r := range b.Ranges {
			copy(rebuilt[r.Offset:r.Offset+r.Size], imgA[r.Offset:r.Offset+r.Size])
		}
	}
	if len(alloc) == 0 || !bytes.Equal(rebuilt, imgA) {
		t.Errorf("the allocated ranges of A (%v) applied onto zeros do not rebuild A's image", flatten(alloc))
	}
	want := differingBlocks(imgA, imgB)
	if got := mergeRanges(flatten(list(changedblocks.Request{Snapshot: "b", BaseID: handleA}))); len(want) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("delta A→B = %v, want the blocks in which the image copies differ, %v", got, want)
	}
}

// fsVolume creates a filesystem volume and returns its id and the folder of its data.
func (e *env) fsVolume(t *testing.T, name string) (string, string) {
	t.Helper()
	resp, err := e.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	return id, e.volumePath(id)
}

// writeFile creates a file of n random bytes.
func writeFile(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	writeRanges(t, path, [][2]int64{{0, int64(n)}})
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// differingBlocks lists, merged, the 4 KiB blocks in which a and b (of one length) differ.
func differingBlocks(a, b []byte) [][2]int64 {
	var out [][2]int64
	for off := 0; off+4096 <= len(a); off += 4096 {
		if bytes.Equal(a[off:off+4096], b[off:off+4096]) {
			continue
		}
		if n := len(out); n > 0 && out[n-1][0]+out[n-1][1] == int64(off) {
			out[n-1][1] += 4096
			continue
		}
		out = append(out, [2]int64{int64(off), 4096})
	}
	return out
}
