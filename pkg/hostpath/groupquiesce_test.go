package hostpath

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
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

// TestGroupSnapshotWhileWriting takes group snapshots of {A, B} while a
// process in its own mount namespace, with both volumes bind mounted the
// way a pod has them, writes the counters. A is padded so that its copy
// takes long and reads the counter last: without quiescing, A's copy sees a
// far later number than B's.
func TestGroupSnapshotWhileWriting(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1) to start the writer in a mount namespace of its own")
	}
	for _, tc := range []struct {
		name string
		// cgroup is the hierarchy the writer gets a cgroup of its own in,
		// "" to leave it in the test's.
		cgroup string
		// forking makes the writer a shell loop that forks two processes
		// per number: children appear between a scan and the stop.
		forking bool
		// want is the kind of target that must have stopped it.
		want  string
		snaps int
	}{
		{name: "signal", want: "process", snaps: 12},
		{name: "forking writer", forking: true, want: "process", snaps: 8},
		{name: "cgroup2", cgroup: "/sys/fs/cgroup/unified", want: "cgroup2", snaps: 8},
		{name: "cgroup1 freezer", cgroup: "/sys/fs/cgroup/freezer", want: "cgroup1", snaps: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cgroup := ""
			if tc.cgroup != "" {
				cgroup = newTestCgroup(t, tc.cgroup)
			}
			testGroupSnapshotWhileWriting(t, cgroup, tc.forking, tc.want, tc.snaps)
		})
	}
}

func testGroupSnapshotWhileWriting(t *testing.T, cgroup string, forking bool, want string, snaps int) {
	// Without fsync: what is tested is one instant, and flushing every copy would load the disk
	// of a machine that runs the control-plane tests beside this one.
	e := newTestEnv(t, func(o *Options) { o.GroupSnapshotQuiesce = !*quiesceOff; o.Sync = false })
	kinds := recordTargets(e.d.quiesce)
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
	// Published as for a pod: the targets are mounts in the driver's (and
	// here the host's) namespace, which must not count as users.
	pubA, pubB := publish(t, e, a, mountCap()), publish(t, e, b, blockCap())
	writer := startWriter(t, e, cgroup, forking, pubA, pubB)
	readA := func() uint64 { return readCounter(t, filepath.Join(e.d.volumePath(a), "counter")) }
	waitFor(t, "the writer to start", func() bool { return readA() > 0 })

	torn := 0
	for i := range snaps {
		resp, err := e.group.CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{
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
		if _, err := e.group.DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: g.GetGroupSnapshotId()}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d group snapshots torn; quiesce targets %v", torn, snaps, kinds())
	if *quiesceOff {
		return
	}
	// Each group snapshot scans at least twice: to stop, then to find
	// nothing new.
	if got := kinds(); len(got) != 1 || got[want] < 2*snaps {
		t.Errorf("scans that found each kind of target = %v, want only %s, at least twice per group snapshot", got, want)
	}
	// Every stop was undone: the writer runs on.
	last := readA()
	waitFor(t, "the writer to run again", func() bool { return readA() > last })
	if st, err := readProcStat(fmt.Sprintf("/proc/%d/stat", writer.Process.Pid)); err != nil || st.state == 'T' {
		t.Errorf("writer state = %c, %v; want running", st.state, err)
	}
}

// publish publishes vol at a target under e.dir and unpublishes it when
// the test ends.
func publish(t *testing.T, e *testEnv, vol string, c *csi.VolumeCapability) string {
	t.Helper()
	target := filepath.Join(e.dir, "publish", vol)
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

// recordTargets wraps q's scan and returns a function that reports in how
// many scans each kind of target was found.
func recordTargets(q *quiescer) func() map[string]int {
	var mu sync.Mutex
	seen := map[string]int{}
	find := q.find
	q.find = func(paths []string) ([]target, int, error) {
		targets, n, err := find(paths)
		kinds := map[string]bool{}
		for _, tg := range targets {
			kinds[tg.record().Kind] = true
		}
		mu.Lock()
		defer mu.Unlock()
		for k := range kinds {
			seen[k]++
		}
		return targets, n, err
	}
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// startWriter runs TestCounterWriterProcess (or with forking, a shell loop
// doing the same with dd) in a new mount namespace with the published
// volume a bind mounted on a directory and the block volume b on a file, as
// a container runtime does, in cgroup if it is not "". It is killed when
// the test ends.
func startWriter(t *testing.T, e *testEnv, cgroup string, forking bool, volA, volB string) *exec.Cmd {
	t.Helper()
	mntA, mntB := filepath.Join(e.dir, "mnt", "a"), filepath.Join(e.dir, "mnt", "b")
	if err := os.MkdirAll(mntA, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mntB, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `set -e
[ -z "$6" ] || echo $$ > "$6/cgroup.procs"
mount --bind "$1" "$3"
mount --bind "$2" "$4"
[ -n "$7" ] || exec "$5" -test.run='^TestCounterWriterProcess$'
n=0
while :; do
	n=$((n+1))
	printf '%020d\n' $n | dd of="$3/counter" conv=notrunc status=none
	printf '%020d\n' $n | dd of="$4" conv=notrunc status=none
done`
	fork := ""
	if forking {
		fork = "fork"
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", volA, volB, mntA, mntB, exe, cgroup, fork)
	cmd.Env = append(os.Environ(), writerEnv+"="+filepath.Join(mntA, "counter")+":"+mntB)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// newTestCgroup makes a cgroup in the hierarchy mounted at root and
// removes it when the test ends.
func newTestCgroup(t *testing.T, root string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		t.Skipf("no cgroup hierarchy at %s: %v", root, err)
	}
	dir := filepath.Join(root, fmt.Sprintf("shutter-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		// The writer is killed by an earlier cleanup; its cgroup empties
		// once it is reaped.
		for range 100 {
			if err := os.Remove(dir); err == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Errorf("cgroup %s left behind", dir)
	})
	return dir
}

func readCounter(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
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

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// BenchmarkGroupSnapshotIdle measures what quiescing adds to a group
// snapshot of two small volumes no process uses: one scan of /proc.
func BenchmarkGroupSnapshotIdle(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("quiesce=%v", on), func(b *testing.B) {
			e := newTestEnv(b, func(o *Options) { o.GroupSnapshotQuiesce = on })
			var vols []string
			for _, name := range []string{"a", "b"} {
				v := e.createVolume(b, name, 1<<20, mountCap()).GetVolumeId()
				if err := os.WriteFile(filepath.Join(e.d.volumePath(v), "data"), make([]byte, 64<<10), 0o644); err != nil {
					b.Fatal(err)
				}
				vols = append(vols, v)
			}
			for i := 0; b.Loop(); i++ {
				resp, err := e.group.CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{
					Name: fmt.Sprintf("g%d", i), SourceVolumeIds: vols,
				})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if _, err := e.group.DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{
					GroupSnapshotId: resp.GetGroupSnapshot().GetGroupSnapshotId(),
				}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkProcScan measures one scan of /proc for the users of two
// volumes, with and without the open file check.
func BenchmarkProcScan(b *testing.B) {
	paths := []string{b.TempDir(), b.TempDir()}
	for _, files := range []bool{false, true} {
		b.Run(fmt.Sprintf("files=%v", files), func(b *testing.B) {
			for b.Loop() {
				if _, err := (procScan{proc: "/proc", files: files}).users(paths); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
