//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// outcome is what a client knows about one object after the driver died:
// its create or delete was acknowledged, or the call never answered.
type outcome int

const (
	created outcome = iota + 1
	deleted
	unknown
)

// ledger records the outcome of every create and delete clients issued.
type ledger struct {
	mu      sync.Mutex
	volumes map[string]outcome
	snaps   map[string]outcome
	// empty holds the snapshots taken of volumes without data, which
	// have no data of their own.
	empty map[string]bool
}

func (l *ledger) set(m map[string]outcome, id string, o outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m[id] = o
}

// churn creates a volume with large parameters (so frames are big and the
// log compacts often), writes a file into every other one, snapshots it,
// and deletes the previous pair, until a call fails, which happens once
// the driver is killed.
func churn(ctx context.Context, ctrl csi.ControllerClient, dataDir string, worker, cycle int, l *ledger) {
	pad := strings.Repeat("p", 2000)
	var prevVol, prevSnap string
	for i := 0; ; i++ {
		name := fmt.Sprintf("c%d-w%d-%d", cycle, worker, i)
		volID, snapID := deriveID(volumePrefix, name), deriveID(snapshotPrefix, name)
		l.set(l.volumes, volID, unknown)
		_, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap()}, Parameters: map[string]string{"pad": pad},
		})
		if err != nil {
			return
		}
		l.set(l.volumes, volID, created)
		if i%2 == 0 {
			l.mu.Lock()
			l.empty[snapID] = true
			l.mu.Unlock()
		} else if err := os.WriteFile(filepath.Join(dataDir, "volumes", volID, "f"), []byte(name), 0o644); err != nil {
			return
		}
		l.set(l.snaps, snapID, unknown)
		if _, err := ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volID}); err != nil {
			return
		}
		l.set(l.snaps, snapID, created)
		if prevVol != "" {
			l.set(l.snaps, prevSnap, unknown)
			if _, err := ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: prevSnap}); err != nil {
				return
			}
			l.set(l.snaps, prevSnap, deleted)
			l.set(l.volumes, prevVol, unknown)
			if _, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: prevVol}); err != nil {
				return
			}
			l.set(l.volumes, prevVol, deleted)
		}
		prevVol, prevSnap = volID, snapID
	}
}

// compacting reports whether the driver is writing a compacted record log.
func compacting(stateDir string) bool {
	entries, _ := os.ReadDir(stateDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix+"records.log") {
			return true
		}
	}
	return false
}

// TestSIGKILLDuringRecordLog kills the driver process while clients
// create and delete volumes and snapshots (of empty volumes and of volumes
// holding a file) as fast as they can, preferably
// while the record log is being compacted, several times over. After every
// restart each acknowledged create must be there (snapshots ready, with
// their data), each acknowledged delete gone, and no temporary log left.
func TestSIGKILLDuringRecordLog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver and kills it repeatedly")
	}
	bin, dir := buildDriver(t), t.TempDir()
	stateDir := filepath.Join(dir, "data", "state")
	l := &ledger{volumes: map[string]outcome{}, snaps: map[string]outcome{}, empty: map[string]bool{}}
	caught := 0
	for cycle := range 3 {
		p := startDriver(t, bin, dir)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() { churn(ctx, p.ctrl, filepath.Join(dir, "data"), w, cycle, l) })
		}
		// Kill during a compaction if one comes within the time limit.
		deadline := time.Now().Add(time.Duration(2+cycle) * time.Second)
		for time.Now().Before(deadline) && !compacting(stateDir) {
			time.Sleep(50 * time.Microsecond)
		}
		if compacting(stateDir) {
			caught++
		}
		p.kill(t)
		cancel()
		wg.Wait()

		p = startDriver(t, bin, dir)
		checkLedger(t, p.ctrl, dir, l)
		if compacting(stateDir) {
			t.Fatal("a temporary record log survived the restart")
		}
		p.kill(t)
	}
	t.Logf("%d of 3 kills hit a compaction in progress", caught)
}

// checkLedger compares what the restarted driver reports with what
// clients were told.
func checkLedger(t *testing.T, ctrl csi.ControllerClient, dir string, l *ledger) {
	t.Helper()
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, o := range l.volumes {
		_, err := ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
		switch {
		case o == created && err != nil:
			t.Fatalf("acknowledged volume %s lost: %v", id, err)
		case o == deleted && status.Code(err) != codes.NotFound:
			t.Fatalf("deleted volume %s is back: %v", id, err)
		}
	}
	for id, o := range l.snaps {
		resp, err := ctrl.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: id})
		switch {
		case o == created && (err != nil || !resp.GetSnapshot().GetReadyToUse()):
			t.Fatalf("acknowledged snapshot %s lost: %v, %v", id, resp, err)
		case o == deleted && status.Code(err) != codes.NotFound:
			t.Fatalf("deleted snapshot %s is back: %v", id, err)
		}
		if err != nil {
			continue
		}
		_, err = os.Lstat(filepath.Join(dir, "data", "snapshots", id))
		switch {
		case !l.empty[id] && err != nil:
			t.Fatalf("snapshot %s is reported but its data is missing: %v", id, err)
		case l.empty[id] && err == nil:
			t.Fatalf("snapshot %s of an empty volume has data", id)
		}
	}
}

// TestUpgradeFromRecordFiles starts the driver on a data directory written
// by the version that kept one JSON file per record and checks that it
// loses nothing: volumes, a snapshot with its data, a group snapshot and a
// pending restore all survive, and the old record files are gone.
func TestUpgradeFromRecordFiles(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	const (
		volID   = "vol-00000000000000000000000000000001"
		restID  = "vol-00000000000000000000000000000002"
		snapID  = "snap-00000000000000000000000000000003"
		groupID = "group-00000000000000000000000000000004"
		member  = "snap-00000000000000000000000000000005"
	)
	files := map[string]string{
		"state/volumes/" + volID + ".json":    `{"id":"` + volID + `","name":"old-vol","capacityBytes":1048576,"accessType":"block","createdAt":"2025-01-02T03:04:05Z"}`,
		"state/volumes/" + restID + ".json":   `{"id":"` + restID + `","name":"old-restored","capacityBytes":1048576,"accessType":"block","sourceSnapshotID":"` + snapID + `","createdAt":"2025-01-02T03:04:05Z"}`,
		"state/snapshots/" + snapID + ".json": `{"id":"` + snapID + `","name":"old-snap","sourceVolumeID":"` + volID + `","accessType":"block","sizeBytes":1048576,"createdAt":"2025-01-02T03:04:05Z"}`,
		"state/snapshots/" + member + ".json": `{"id":"` + member + `","name":"old-group/` + volID + `","sourceVolumeID":"` + volID + `","accessType":"block","sizeBytes":1048576,"groupSnapshotID":"` + groupID + `","createdAt":"2025-01-02T03:04:05Z"}`,
		"state/groups/" + groupID + ".json":   `{"id":"` + groupID + `","name":"old-group","sourceVolumeIDs":["` + volID + `"],"snapshotIDs":["` + member + `"],"createdAt":"2025-01-02T03:04:05Z"}`,
		"state/restores/" + restID + ".json":  `{"volumeID":"` + restID + `","snapshotID":"` + snapID + `","bootID":"an-earlier-boot"}`,
	}
	content := randomBytes(t, 1<<20)
	for _, p := range []string{"volumes/" + volID, "volumes/" + restID, "snapshots/" + snapID, "snapshots/" + member} {
		files[p] = string(content)
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(data, p)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, p), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e := newTestEnv(t, func(o *Options) { o.DataDir = data; o.Sync = true })
	ctx := context.Background()
	for _, id := range []string{volID, restID} {
		if _, err := e.ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("volume %s lost in the upgrade: %v", id, err)
		}
	}
	snap, err := e.ctrl.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: snapID})
	if err != nil || !snap.GetSnapshot().GetReadyToUse() {
		t.Fatalf("snapshot lost in the upgrade: %v, %v", snap, err)
	}
	g, err := e.group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: groupID})
	if err != nil || len(g.GetGroupSnapshot().GetSnapshots()) != 1 {
		t.Fatalf("group snapshot lost in the upgrade: %v, %v", g, err)
	}
	// The marker named another boot, so the restore was copied again.
	e.d.restores.drain()
	if !sameFile(t, e.d.volumePath(restID), e.d.snapshotPath(snapID)) {
		t.Fatal("the pending restore was not redone from its snapshot")
	}
	for _, kind := range []string{"volumes", "snapshots", "groups", "restores"} {
		if _, err := os.Stat(filepath.Join(data, "state", kind)); !os.IsNotExist(err) {
			t.Fatalf("old record dir %s left behind: %v", kind, err)
		}
	}
	if ids := liveIDs(t, data, "snapshots"); len(ids) != 2 {
		t.Fatalf("record log holds snapshots %v; want both", ids)
	}
}
