//go:build linux

package quiesce

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
		if got, _ := PodOfTarget(target); got != want {
			t.Errorf("PodOfTarget(%s) = %q, want %q", target, got, want)
		}
	}
}

// fakeCgroup makes a folder that looks like a cgroup to the freezer code.
func fakeCgroup(t *testing.T, dir string, frozen bool, procs ...int) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	state := "0"
	if frozen {
		state = "1"
	}
	must(t, os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte(state), 0o644))
	var ps []string
	for _, p := range procs {
		ps = append(ps, strconv.Itoa(p))
	}
	must(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strings.Join(ps, "\n")), 0o644))
}

// TestPodCgroupsFindsOnlyTheAskedPods: both kubelet layouts are found by
// UID; other pods, and a pod cgroup that holds the driver, are not.
func TestPodCgroupsFindsOnlyTheAskedPods(t *testing.T) {
	root := t.TempDir()
	must(t, os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory"), 0o644))
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

// TestPodCgroupsUsesTheV1Freezer: without a unified hierarchy at the root,
// pods are found, and frozen, in the v1 freezer hierarchy below it.
func TestPodCgroupsUsesTheV1Freezer(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "freezer", "kubepods", "besteffort", "pod"+podA)
	must(t, os.MkdirAll(a, 0o755))
	targets, err := podCgroups{root: root, self: os.Getpid()}.find([]string{podA, podB})
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) != 1 || targets[0].record() != (heldRecord{Kind: "cgroup1", Dir: a}) {
		t.Fatalf("found %v, want the v1 freezer cgroup %s", targets, a)
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
		_, _, err := q.Run(ctx, "g1", []string{"stuck"}, job)
		got = append(got, codeOf(err))
	}
	want := []codes.Code{codes.Unavailable, codes.Unavailable, codes.FailedPrecondition}
	if !slices.Equal(got, want) {
		t.Fatalf("codes of repeated timeouts = %v, want %v", got, want)
	}
	if _, _, err := q.Run(ctx, "g2", []string{"stuck"}, job); codeOf(err) != codes.Unavailable {
		t.Fatalf("another group snapshot: %v, want Unavailable", err)
	}
	if _, _, err := q.Run(ctx, "g2", []string{"fine"}, job); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Run(ctx, "g2", []string{"stuck"}, job); codeOf(err) != codes.Unavailable {
		t.Fatalf("after a success the count starts again: %v, want Unavailable", err)
	}
}

func codeOf(err error) codes.Code { return status.Code(err) }

// must fails the test at the first error of errs.
func must(t *testing.T, errs ...error) {
	t.Helper()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root; CI runs the driver tests as root")
	}
}

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
	must(t, err)
	return string(b) == "1"
}

func writeJournal(t *testing.T, dir string, recs ...heldRecord) string {
	t.Helper()
	path := filepath.Join(dir, "quiesced.json")
	b, err := json.Marshal(recs)
	must(t, err)
	must(t, os.WriteFile(path, b, 0o644))
	return path
}

// TestJournalRecoveryContinuesAndRetries: a record that cannot be resumed
// does not stop the others, stays in the journal, and is resumed by a
// later retry.
func TestJournalRecoveryContinuesAndRetries(t *testing.T) {
	requireRoot(t) // trusted.* extended attributes
	dir := t.TempDir()
	broken, fine := filepath.Join(dir, "broken"), filepath.Join(dir, "fine")
	rb, rf := frozenByDriver(t, broken), frozenByDriver(t, fine)
	// The thaw of broken fails: its freeze file cannot be read.
	must(t, os.Remove(filepath.Join(broken, "cgroup.freeze")))
	must(t, os.Mkdir(filepath.Join(broken, "cgroup.freeze"), 0o755))
	journal := writeJournal(t, dir, rb, rf)
	q := New(Config{Journal: journal})
	_, ctx := ktesting.NewTestContext(t)
	_ = q.Recover(ctx)
	if isFrozen(t, fine) {
		t.Fatal("recovery stopped at a record it could not resume")
	}
	var left []heldRecord
	b, err := os.ReadFile(journal)
	must(t, err)
	must(t, json.Unmarshal(b, &left))
	if len(left) != 1 || left[0] != rb {
		t.Fatalf("journal after recovery = %+v, want only the failed record", left)
	}
	must(t, os.Remove(filepath.Join(broken, "cgroup.freeze")))
	must(t, os.WriteFile(filepath.Join(broken, "cgroup.freeze"), []byte("1"), 0o644))
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
	requireRoot(t) // trusted.* extended attributes
	for _, tc := range []struct {
		name string
		// change alters the cgroup after the driver froze it.
		change   func(t *testing.T, dir string)
		wantThaw bool
	}{
		{name: "still ours", change: func(*testing.T, string) {}, wantThaw: true},
		{name: "recreated", change: func(t *testing.T, dir string) {
			must(t, os.RemoveAll(dir))
			fakeCgroup(t, dir, true)
		}},
		{name: "frozen again by someone else", change: func(t *testing.T, dir string) {
			must(t, unix.Setxattr(dir, freezeMarkAttr, []byte("someone-else"), 0))
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
