//go:build linux

package hostpath

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
)

const (
	podA = "11111111-2222-4333-8444-555555555555"
	podB = "66666666-7777-4888-9999-aaaaaaaaaaaa"
	podC = "bbbbbbbb-cccc-4ddd-8eee-ffffffffffff"
	podD = "01234567-89ab-4cde-8f01-23456789abcd"
)

func TestQuiesceIsOptInWithShortTimeout(t *testing.T) {
	o := DefaultOptions()
	if o.GroupSnapshotQuiesce {
		t.Error("group snapshot quiescing is on by default")
	}
	if o.GroupSnapshotQuiesceTimeout > 10*time.Second {
		t.Errorf("default quiesce timeout %v, want seconds", o.GroupSnapshotQuiesceTimeout)
	}
}

func TestPodOfTarget(t *testing.T) {
	for target, want := range map[string]string{
		"/var/lib/kubelet/pods/" + podA + "/volumes/kubernetes.io~csi/pvc-1/mount":       podA,
		"/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-2/" + podB: podB,
		"/host_pods/" + podA + "/volumes/kubernetes.io~csi/pvc-1/mount":                  "",
		"/var/lib/kubelet/pods/not-a-uid/volumes/kubernetes.io~csi/pvc-1/mount":          "",
		"/mnt/elsewhere": "",
		"/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pvc-2/" + podB:               "",
		"/var/lib/kubelet/pods/" + podA + "/volumes/kubernetes.io~csi/pvc-1/mount/../../../../" + podB: "",
	} {
		if got, _ := podOfTarget(target); got != want {
			t.Errorf("podOfTarget(%s) = %q, want %q", target, got, want)
		}
	}
}

// fakeCgroup makes a folder that looks like a cgroup to the freezer code.
func fakeCgroup(t *testing.T, dir string, frozen bool, procs ...int) {
	t.Helper()
	mustDo(t, os.MkdirAll(dir, 0o755))
	state := "0"
	if frozen {
		state = "1"
	}
	mustDo(t, os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte(state), 0o644))
	var ps []string
	for _, p := range procs {
		ps = append(ps, strconv.Itoa(p))
	}
	mustDo(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strings.Join(ps, "\n")), 0o644))
}

// TestPodCgroupsFindsOnlyTheAskedPods: both kubelet layouts are found by
// UID; other pods, and a pod cgroup that holds the driver, are not.
func TestPodCgroupsFindsOnlyTheAskedPods(t *testing.T) {
	root := t.TempDir()
	mustDo(t, os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory"), 0o644))
	a := filepath.Join(root, "kubepods", "burstable", "pod"+podA)
	b := filepath.Join(root, "kubepods.slice", "kubepods-besteffort.slice", "kubepods-besteffort-pod"+strings.ReplaceAll(podB, "-", "_")+".slice")
	fakeCgroup(t, a, false, 100)
	fakeCgroup(t, b, false, 200)
	fakeCgroup(t, filepath.Join(root, "kubepods", "pod"+podC), false, 300)
	fakeCgroup(t, filepath.Join(root, "kubepods", "pod"+podD, "container"), false, os.Getpid())
	fakeCgroup(t, filepath.Join(root, "system.slice", "backup-agent.service"), false, 400)
	targets, err := podCgroups{root: root, self: os.Getpid()}.find([]string{podA, podB, podD, "../../system.slice"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tg := range targets {
		got = append(got, tg.record().Dir)
	}
	if want := []string{a, b}; !slices.Equal(got, want) {
		t.Fatalf("found %v, want %v", got, want)
	}
}

// TestGroupSnapshotAsksForPublishedPodsOnly: the pods quiesced are those a
// member is published to read-write through a kubelet pod target; a
// read-only pod and a mount elsewhere are not.
func TestGroupSnapshotAsksForPublishedPodsOnly(t *testing.T) {
	requireRoot(t)
	e := newTestEnv(t, func(o *Options) { o.GroupSnapshotQuiesce = true })
	var asked [][]string
	e.d.quiesce.find = func(uids []string) ([]target, error) {
		asked = append(asked, uids)
		return nil, nil
	}
	a := e.createVolume(t, "a", 1<<20, mountCap()).GetVolumeId()
	b := e.createVolume(t, "b", 1<<20, mountCap()).GetVolumeId()
	kubelet := filepath.Join(e.dir, "kubelet", "pods")
	publishAt(t, e, a, mountCap(), filepath.Join(kubelet, podA, "volumes", "kubernetes.io~csi", "pv-a", "mount"))
	publishAt(t, e, a, mountCap(), filepath.Join(e.dir, "host_pods", podC, "volumes", "kubernetes.io~csi", "pv-a", "mount"))
	ro := filepath.Join(kubelet, podB, "volumes", "kubernetes.io~csi", "pv-b", "mount")
	if _, err := e.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: b, TargetPath: ro, VolumeCapability: mountCap(), Readonly: true,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: b, TargetPath: ro})
	})
	_, ctx := ktesting.NewTestContext(t)
	if _, err := (&groupControllerServer{d: e.d}).CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{
		Name: "g", SourceVolumeIds: []string{a, b},
	}); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || !slices.Equal(asked[0], []string{podA}) {
		t.Fatalf("asked to freeze %v, want [[%s]]", asked, podA)
	}
}

// TestQuiesceFailsForGoodAfterRepeatedTimeouts: the same group snapshot
// timing out again and again ends with a final code; another is not
// affected, and a success resets the count.
func TestQuiesceFailsForGoodAfterRepeatedTimeouts(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newFakeWorld()
	w.slow["stuck"] = 1 << 30
	q := newFakeQuiescer(t, w, 20*time.Millisecond)
	job := []func() error{func() error { return nil }}
	var got []codes.Code
	for range maxQuiesceTimeouts {
		_, _, err := q.run(ctx, "g1", []string{"stuck"}, job)
		got = append(got, codeOf(err))
	}
	want := []codes.Code{codes.Unavailable, codes.Unavailable, codes.FailedPrecondition}
	if !slices.Equal(got, want) {
		t.Fatalf("codes of repeated timeouts = %v, want %v", got, want)
	}
	if _, _, err := q.run(ctx, "g2", []string{"stuck"}, job); codeOf(err) != codes.Unavailable {
		t.Fatalf("another group snapshot: %v, want Unavailable", err)
	}
	if _, _, err := q.run(ctx, "g2", []string{"fine"}, job); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.run(ctx, "g2", []string{"stuck"}, job); codeOf(err) != codes.Unavailable {
		t.Fatalf("after a success the count starts again: %v, want Unavailable", err)
	}
}

func codeOf(err error) codes.Code { return status.Code(err) }

// frozenByDriver makes a fake cgroup frozen the way the driver freezes
// one (stop) and returns its journal record.
func frozenByDriver(t *testing.T, dir string) heldRecord {
	t.Helper()
	fakeCgroup(t, dir, false)
	c := &cgroupTarget{version: 2, dir: dir}
	if ours, err := c.stop(); !ours || err != nil {
		t.Fatalf("stop = %v, %v", ours, err)
	}
	if c.mark == "" {
		t.Skip("the test folder takes no trusted.* extended attributes")
	}
	return c.record()
}

func isFrozen(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.freeze"))
	mustDo(t, err)
	return string(b) == "1"
}

func writeJournal(t *testing.T, dataDir string, recs ...heldRecord) string {
	t.Helper()
	path := quiesceJournal(dataDir)
	mustDo(t, os.MkdirAll(filepath.Dir(path), 0o755))
	b, err := json.Marshal(recs)
	mustDo(t, err)
	mustDo(t, os.WriteFile(path, b, 0o644))
	return path
}

// TestJournalIsResumedFirst: pods a killed driver left frozen are thawed
// by the next start even when the state cannot be read or the data folder
// is locked.
func TestJournalIsResumedFirst(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, o Options)
	}{
		{name: "unreadable state", breakIt: func(t *testing.T, o Options) {
			mustDo(t, os.MkdirAll(filepath.Join(o.DataDir, "state", "records.log"), 0o755))
		}},
		{name: "data folder locked", breakIt: func(t *testing.T, o Options) {
			l, err := lockDataDir(o.DataDir)
			mustDo(t, err)
			t.Cleanup(func() { _ = l.release() })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := testOptions(dir)
			cg := filepath.Join(dir, "cgroup")
			writeJournal(t, o.DataDir, frozenByDriver(t, cg))
			tc.breakIt(t, o)
			_, ctx := ktesting.NewTestContext(t)
			if d, err := New(ctx, o); err == nil {
				_ = d.Close()
				t.Fatal("New succeeded on a broken data folder")
			}
			if isFrozen(t, cg) {
				t.Fatal("a driver that could not start left the pod frozen")
			}
		})
	}
}

// TestJournalRecoveryContinuesAndRetries: a record that cannot be resumed
// does not stop the others, stays in the journal, and is resumed by a
// later retry.
func TestJournalRecoveryContinuesAndRetries(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	broken, fine := filepath.Join(dir, "broken"), filepath.Join(dir, "fine")
	rb, rf := frozenByDriver(t, broken), frozenByDriver(t, fine)
	// The thaw of broken fails: its freeze file cannot be read.
	mustDo(t, os.Remove(filepath.Join(broken, "cgroup.freeze")))
	mustDo(t, os.Mkdir(filepath.Join(broken, "cgroup.freeze"), 0o755))
	dataDir := filepath.Join(dir, "data")
	journal := writeJournal(t, dataDir, rb, rf)
	q := newQuiescer(Options{DataDir: dataDir})
	_, ctx := ktesting.NewTestContext(t)
	_ = q.recover(ctx)
	if isFrozen(t, fine) {
		t.Fatal("recovery stopped at a record it could not resume")
	}
	var left []heldRecord
	b, err := os.ReadFile(journal)
	mustDo(t, err)
	mustDo(t, json.Unmarshal(b, &left))
	if len(left) != 1 || left[0] != rb {
		t.Fatalf("journal after recovery = %+v, want only the failed record", left)
	}
	mustDo(t, os.Remove(filepath.Join(broken, "cgroup.freeze")))
	mustDo(t, os.WriteFile(filepath.Join(broken, "cgroup.freeze"), []byte("1"), 0o644))
	q.retryPending(ctx)
	if isFrozen(t, broken) {
		t.Fatal("the retry did not thaw the record that failed")
	}
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal left after every record was resumed: %v", err)
	}
}

// TestThawOnlyWhatIsStillOurs: recovery thaws a cgroup only while it is
// the one the driver froze (same inode, its mark) and still frozen.
func TestThawOnlyWhatIsStillOurs(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name string
		// change alters the cgroup after the driver froze it.
		change   func(t *testing.T, dir string)
		wantThaw bool
	}{
		{name: "still ours", change: func(*testing.T, string) {}, wantThaw: true},
		{name: "recreated", change: func(t *testing.T, dir string) {
			mustDo(t, os.RemoveAll(dir))
			fakeCgroup(t, dir, true)
		}},
		{name: "frozen again by someone else", change: func(t *testing.T, dir string) {
			mustDo(t, unix.Setxattr(dir, freezeMarkAttr, []byte("someone-else"), 0))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cgroup")
			r := frozenByDriver(t, dir)
			tc.change(t, dir)
			if err := resumeRecord("/proc", r); err != nil {
				t.Fatal(err)
			}
			if thawed := !isFrozen(t, dir); thawed != tc.wantThaw {
				t.Fatalf("thawed = %v, want %v", thawed, tc.wantThaw)
			}
		})
	}
}
