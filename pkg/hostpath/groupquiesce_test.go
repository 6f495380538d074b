//go:build linux

package hostpath

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
	"github.com/shutter-csi/shutter/pkg/hostpath/quiesce"
	"github.com/shutter-csi/shutter/test/testenv"
)

var quiesceOff = flag.Bool("quiesce-off", false,
	"run TestGroupSnapshotWhileWriting with --group-snapshot-quiesce=false, to see it fail")

// writerEnv passes the two counter files to the writer helper process.
const writerEnv = "SHUTTER_TEST_COUNTER_WRITER"

// TestCounterWriterProcess is the workload of TestGroupSnapshotWhileWriting,
// run in a process of its own: it writes 1, 2, 3... to the counter in
// volume A and then the same number to volume B, as fast as it can, each
// write replacing the previous number in place. At any instant B <= A <= B+1.
func TestCounterWriterProcess(t *testing.T) {
	spec := os.Getenv(writerEnv)
	if spec == "" {
		t.Skip("helper process of TestGroupSnapshotWhileWriting")
	}
	a, b, _ := strings.Cut(spec, ":")
	fa, err := os.OpenFile(a, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.OpenFile(b, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for n := uint64(1); ; n++ {
		buf := []byte(fmt.Sprintf("%020d\n", n))
		if _, err := fa.WriteAt(buf, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := fb.WriteAt(buf, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// testPodUID is the UID of the pod the test writers pose as.
const testPodUID = "0d5f3c2a-7b1e-4c9d-8f6a-2e4b5c6d7e8f"

// TestGroupSnapshotWhileWriting takes group snapshots of {A, B} while a
// process in a pod's cgroup writes the counters through the volumes'
// publish targets of that pod. A is padded so that its copy takes long and
// reads the counter last: without quiescing, A's copy sees a far later
// number than B's.
func TestGroupSnapshotWhileWriting(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name string
		// hier is the cgroup hierarchy the test's kubepods tree is made in.
		hier string
		// forking makes the writer a shell loop that forks two processes
		// per number: the freeze must cover the children too.
		forking bool
		snaps   int
	}{
		{name: "cgroup2", hier: "/sys/fs/cgroup/unified", snaps: 8},
		{name: "cgroup2 forking writer", hier: "/sys/fs/cgroup/unified", forking: true, snaps: 6},
		{name: "cgroup1 freezer", hier: "/sys/fs/cgroup/freezer", snaps: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, pod := newPodCgroup(t, tc.hier, testPodUID)
			testGroupSnapshotWhileWriting(t, root, pod, tc.forking, tc.snaps)
		})
	}
}

func testGroupSnapshotWhileWriting(t *testing.T, cgroupRoot, pod string, forking bool, snaps int) {
	// Without fsync: what is tested is one instant, and flushing every copy would load the disk
	// of a machine that runs the control-plane tests beside this one.
	e := newTestEnv(t, func(o *Options) {
		o.GroupSnapshotQuiesce, o.CgroupRoot, o.Sync = !*quiesceOff, cgroupRoot, false
	})
	runs := recordQuiesce(e.d)
	// The group snapshots are cut by direct calls, in this goroutine: the
	// hooks are set without a race.
	group := &groupControllerServer{d: e.d}
	var frozenMu sync.Mutex
	var frozenAtCopy []bool
	e.d.copier.Hooks = &fscopy.Hooks{Listed: func(rel string) {
		if rel == "counter" {
			frozenMu.Lock()
			defer frozenMu.Unlock()
			frozenAtCopy = append(frozenAtCopy, isFrozen(pod))
		}
	}}
	a := e.createVolume(t, "a", 256<<20, mountCap()).GetVolumeId()
	b := e.createVolume(t, "b", 1<<20, blockCap()).GetVolumeId()
	// "0pad" sorts before "counter": A's counter is copied last.
	if err := os.WriteFile(filepath.Join(e.d.volumePath(a), "0pad"), randomBytes(t, 32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.d.volumePath(a), "counter"), []byte(fmt.Sprintf("%020d\n", 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.writeAt(t, b, 0, []byte(fmt.Sprintf("%020d\n", 0)))
	// Published as the kubelet publishes for the pod.
	kubelet := filepath.Join(e.dir, "kubelet")
	pubA := publishAt(t, e, a, mountCap(), filepath.Join(kubelet, "pods", testPodUID, "volumes", "kubernetes.io~csi", "pv-a", "mount"))
	pubB := publishAt(t, e, b, blockCap(), filepath.Join(kubelet, "plugins", "kubernetes.io", "csi", "volumeDevices", "publish", "pv-b", testPodUID))
	startWriter(t, pod, forking, pubA, pubB)
	readA := func() uint64 { return readCounter(t, filepath.Join(e.d.volumePath(a), "counter")) }
	testenv.WaitUntil(t, "the writer starts", 10*time.Second, func(context.Context) bool { return readA() > 0 })

	torn := 0
	for i := range snaps {
		resp, err := group.CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{
			Name: fmt.Sprintf("g%d", i), SourceVolumeIds: []string{a, b},
		})
		if err != nil {
			t.Fatal(err)
		}
		g := resp.GetGroupSnapshot()
		var na, nb uint64
		for _, s := range g.GetSnapshots() {
			if s.GetSourceVolumeId() == a {
				na = readCounter(t, filepath.Join(e.d.snapshotPath(s.GetSnapshotId()), "counter"))
			} else {
				nb = readCounter(t, e.d.snapshotPath(s.GetSnapshotId()))
			}
		}
		if nb > na || na > nb+1 {
			torn++
			t.Errorf("group snapshot %d: A = %d, B = %d; one instant has B <= A <= B+1", i, na, nb)
		}
		if _, err := group.DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: g.GetGroupSnapshotId()}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d group snapshots torn; pod frozen while A's counter was copied: %v", torn, snaps, frozenAtCopy)
	if *quiesceOff {
		return
	}
	if n := len(runs.list()); n != snaps {
		t.Errorf("%d quiesced runs, want one per group snapshot (%d)", n, snaps)
	}
	for i, r := range runs.list() {
		if r.res.Targets != 1 {
			t.Errorf("group snapshot %d froze %d cgroups, want the pod's", i, r.res.Targets)
		}
	}
	if want := slices.Repeat([]bool{true}, snaps); !slices.Equal(frozenAtCopy, want) {
		t.Errorf("pod frozen while A's counter was copied = %v, want %v", frozenAtCopy, want)
	}
	// Every freeze was undone: the writer runs on.
	last := readA()
	testenv.WaitUntil(t, "the writer runs again", 10*time.Second, func(context.Context) bool { return readA() > last })
	if isFrozen(pod) {
		t.Error("the pod's cgroup is still frozen")
	}
}

// publishAt publishes vol at target and unpublishes it when the test ends.
func publishAt(t *testing.T, e *testEnv, vol string, c *csi.VolumeCapability, target string) string {
	t.Helper()
	if _, err := e.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: vol, TargetPath: target, VolumeCapability: c,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := e.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: target}); err != nil {
			t.Error(err)
		}
	})
	return target
}

// quiesceRun is one run of the driver's quiescer: the pods it was asked
// to freeze and what it froze.
type quiesceRun struct {
	uids []string
	res  quiesce.Result
}

// quiesceRecorder wraps a driver's quiescer and records its runs.
type quiesceRecorder struct {
	groupQuiescer
	mu   sync.Mutex
	runs []quiesceRun
}

// recordQuiesce makes d's quiescer record its runs. Set it before d
// serves, or call d's services directly: d.quiesce is not guarded.
func recordQuiesce(d *Driver) *quiesceRecorder {
	r := &quiesceRecorder{groupQuiescer: d.quiesce}
	d.quiesce = r
	return r
}

func (r *quiesceRecorder) Run(ctx context.Context, key string, uids []string, jobs []func() error) (quiesce.Result, []error, error) {
	res, errs, err := r.groupQuiescer.Run(ctx, key, uids, jobs)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, quiesceRun{uids: slices.Clone(uids), res: res})
	return res, errs, err
}

func (r *quiesceRecorder) list() []quiesceRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// startWriter runs TestCounterWriterProcess (or with forking, a shell loop
// doing the same with dd) in the cgroup pod, writing through the publish
// targets a and b. It is thawed and killed when the test ends.
func startWriter(t *testing.T, pod string, forking bool, a, b string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `set -e
echo $$ > "$1/cgroup.procs"
[ -n "$5" ] || exec "$4" -test.run='^TestCounterWriterProcess$'
n=0
while :; do
	n=$((n+1))
	printf '%020d\n' $n | dd of="$2/counter" conv=notrunc status=none
	printf '%020d\n' $n | dd of="$3" conv=notrunc status=none
done`
	fork := ""
	if forking {
		fork = "fork"
	}
	cmd := exec.Command("sh", "-c", script, "sh", pod, a, b, exe, fork)
	cmd.Env = append(os.Environ(), writerEnv+"="+filepath.Join(a, "counter")+":"+b)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		thaw(pod)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The forked dd processes of the shell loop are killed with the cgroup.
		killCgroup(t, pod)
	})
}

// newPodCgroup makes, in the hierarchy mounted at hier, a test folder
// holding kubepods/pod<uid> as the kubelet's cgroupfs driver would, and
// returns the root to give the driver (the test folder for v2, a folder
// with a "freezer" link to it for v1) and the pod's cgroup. They are
// removed when the test ends.
func newPodCgroup(t *testing.T, hier, uid string) (root, pod string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(hier, "cgroup.procs")); err != nil {
		t.Skipf("no cgroup hierarchy at %s: %v", hier, err)
	}
	top := filepath.Join(hier, fmt.Sprintf("shutter-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	pod = filepath.Join(top, "kubepods", "pod"+uid)
	if err := os.MkdirAll(pod, 0o755); err != nil {
		_ = os.Remove(filepath.Dir(pod))
		_ = os.Remove(top)
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		for _, dir := range []string{pod, filepath.Dir(pod), top} {
			removeCgroup(t, dir)
		}
	})
	root = top
	if _, err := os.Stat(filepath.Join(hier, "cgroup.controllers")); err != nil {
		root = t.TempDir()
		if err := os.Symlink(top, filepath.Join(root, "freezer")); err != nil {
			t.Fatal(err)
		}
	}
	return root, pod
}

// removeCgroup removes an empty cgroup, waiting for its last tasks to be
// reaped.
func removeCgroup(t *testing.T, dir string) {
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 2*time.Second, true,
		func(context.Context) (bool, error) {
			err := os.Remove(dir)
			return err == nil || os.IsNotExist(err), nil
		})
	if err != nil {
		t.Errorf("cgroup %s left behind: %v", dir, err)
	}
}

// thaw thaws a test cgroup, whatever its version.
func thaw(dir string) {
	_ = os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)
	_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
}

// isFrozen reports whether the cgroup dir is frozen (v1 freezer) or asked
// to freeze (v2); false when dir is neither.
func isFrozen(dir string) bool {
	if b, err := os.ReadFile(filepath.Join(dir, "freezer.state")); err == nil {
		return strings.TrimSpace(string(b)) != "THAWED"
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.freeze"))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// killCgroup kills every task left in the cgroup dir and waits until they
// are gone, so that none holds a file of a volume open any more.
func killCgroup(t *testing.T, dir string) {
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) {
			b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			pids := strings.Fields(string(b))
			for _, f := range pids {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return err != nil || len(pids) == 0, nil
		})
	if err != nil {
		t.Errorf("tasks left in cgroup %s: %v", dir, err)
	}
}

func readCounter(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	mustDo(t, err)
	defer f.Close()
	buf := make([]byte, 21)
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(buf)), 10, 64)
	if err != nil {
		t.Fatalf("counter %s: %v", path, err)
	}
	return n
}

func TestQuiesceIsOptInWithShortTimeout(t *testing.T) {
	o := DefaultOptions()
	if o.GroupSnapshotQuiesce {
		t.Error("group snapshot quiescing is on by default")
	}
	if o.GroupSnapshotQuiesceTimeout > 10*time.Second {
		t.Errorf("default quiesce timeout %v, want seconds", o.GroupSnapshotQuiesceTimeout)
	}
}

// TestGroupSnapshotAsksForPublishedPodsOnly: the pods quiesced are those a
// member is published to read-write through a kubelet pod target; a
// read-only pod and a mount elsewhere are not.
func TestGroupSnapshotAsksForPublishedPodsOnly(t *testing.T) {
	requireRoot(t)
	const reader, elsewhere = "66666666-7777-4888-9999-aaaaaaaaaaaa", "bbbbbbbb-cccc-4ddd-8eee-ffffffffffff"
	// A cgroup hierarchy without pods: nothing is frozen.
	cgroups := t.TempDir()
	mustDo(t, os.WriteFile(filepath.Join(cgroups, "cgroup.controllers"), []byte("cpu memory"), 0o644))
	e := newTestEnv(t, func(o *Options) { o.GroupSnapshotQuiesce, o.CgroupRoot = true, cgroups })
	runs := recordQuiesce(e.d)
	a := e.createVolume(t, "a", 1<<20, mountCap()).GetVolumeId()
	b := e.createVolume(t, "b", 1<<20, mountCap()).GetVolumeId()
	kubelet := filepath.Join(e.dir, "kubelet", "pods")
	publishAt(t, e, a, mountCap(), filepath.Join(kubelet, testPodUID, "volumes", "kubernetes.io~csi", "pv-a", "mount"))
	publishAt(t, e, a, mountCap(), filepath.Join(e.dir, "host_pods", elsewhere, "volumes", "kubernetes.io~csi", "pv-a", "mount"))
	ro := filepath.Join(kubelet, reader, "volumes", "kubernetes.io~csi", "pv-b", "mount")
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
	if got := runs.list(); len(got) != 1 || !slices.Equal(got[0].uids, []string{testPodUID}) {
		t.Fatalf("asked to freeze %+v, want [%s] once", got, testPodUID)
	}
}

// leftFrozen makes the folder cg look like a cgroup v2 that a killed
// driver froze, and writes the journal it left below dataDir. The journal's
// place and form are literal: a new driver must read what an old one wrote.
func leftFrozen(t *testing.T, dataDir, cg string) {
	t.Helper()
	const mark = "00c0ffee00c0ffee"
	mustDo(t, os.MkdirAll(cg, 0o755))
	mustDo(t, os.WriteFile(filepath.Join(cg, "cgroup.freeze"), []byte("1"), 0o644))
	if err := unix.Setxattr(cg, "trusted.shutter.frozen", []byte(mark), 0); err != nil {
		t.Skipf("the test folder takes no trusted.* extended attributes: %v", err)
	}
	var st unix.Stat_t
	mustDo(t, unix.Stat(cg, &st))
	journal := fmt.Sprintf(`[{"kind":"cgroup2","dir":%q,"ino":%d,"mark":%q}]`, cg, st.Ino, mark)
	mustDo(t, os.MkdirAll(filepath.Join(dataDir, "state"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(dataDir, "state", "quiesced.json"), []byte(journal), 0o644))
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
			leftFrozen(t, o.DataDir, cg)
			tc.breakIt(t, o)
			_, ctx := ktesting.NewTestContext(t)
			if d, err := New(ctx, o); err == nil {
				_ = d.Close()
				t.Fatal("New succeeded on a broken data folder")
			}
			if isFrozen(cg) {
				t.Fatal("a driver that could not start left the pod frozen")
			}
		})
	}
}
