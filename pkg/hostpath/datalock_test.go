//go:build linux

package hostpath

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// lockHolderEnv names the data directory TestHelperLockHolder opens in
// the child process.
const lockHolderEnv = "SHUTTER_TEST_LOCK_HOLDER_DIR"

// TestDataDirAdmitsOneDriver: a second driver on a data directory, even in
// the same process, must fail naming the directory and the holder, and
// must leave the first driver's lock in place; once the first is closed, a
// new driver opens.
func TestDataDirAdmitsOneDriver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	o := testOptions(t.TempDir())
	first, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	// Twice: a failed attempt must not release the first driver's lock.
	for range 2 {
		second, err := New(ctx, o)
		wantLocked(t, second, err, o.DataDir, os.Getpid())
	}
	mustDo(t, first.Close())
	third, err := New(ctx, o)
	if err != nil {
		t.Fatalf("New after the first driver was closed: %v", err)
	}
	mustDo(t, third.Close())
}

// TestFailedNewReleasesDataDir: a New that fails after taking the lock must
// release it, or the directory stays locked until the process exits.
func TestFailedNewReleasesDataDir(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	o := testOptions(t.TempDir())
	stateDir := filepath.Join(o.DataDir, "state")
	mustDo(t, os.MkdirAll(o.DataDir, 0o750))
	// A file where the state directory belongs makes opening the state fail.
	mustDo(t, os.WriteFile(stateDir, nil, 0o600))
	if d, err := New(ctx, o); err == nil {
		_ = d.Close()
		t.Fatal("New opened a data directory whose state is a file")
	}
	mustDo(t, os.Remove(stateDir))
	d, err := New(ctx, o)
	if err != nil {
		t.Fatalf("New after a failed New: %v", err)
	}
	mustDo(t, d.Close())
}

// TestDataDirLockedByAnotherProcess: a driver in another process keeps
// this one out and is named by its PID; its death by SIGKILL releases the
// directory without a Close.
func TestDataDirLockedByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^TestHelperLockHolder$")
	child.Env = append(os.Environ(), lockHolderEnv+"="+dir)
	// The child holds the lock until its stdin closes, so it also ends
	// when this process dies.
	_, err := child.StdinPipe()
	mustDo(t, err)
	out, err := child.StdoutPipe()
	mustDo(t, err)
	mustDo(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	waitForLine(t, out, "locked")

	_, ctx := ktesting.NewTestContext(t)
	o := testOptions(dir)
	d, err := New(ctx, o)
	wantLocked(t, d, err, o.DataDir, child.Process.Pid)
	mustDo(t, child.Process.Kill())
	_ = child.Wait()
	d, err = New(ctx, o)
	if err != nil {
		t.Fatalf("New after the holder was killed: %v", err)
	}
	mustDo(t, d.Close())
}

// TestHelperLockHolder is not a test of its own: it is the child of
// TestDataDirLockedByAnotherProcess, holding a driver open on the
// directory in lockHolderEnv until its stdin closes.
func TestHelperLockHolder(t *testing.T) {
	dir := os.Getenv(lockHolderEnv)
	if dir == "" {
		t.Skip("runs only as the child of TestDataDirLockedByAnotherProcess")
	}
	_, ctx := ktesting.NewTestContext(t)
	d, err := New(ctx, testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	mustDo(t, d.Close())
}

// wantLocked fails the test unless New returned no driver and an error
// saying dir is locked by pid.
func wantLocked(t *testing.T, d *Driver, err error, dir string, pid int) {
	t.Helper()
	if d != nil {
		_ = d.Close()
		t.Fatal("a second driver opened a data directory in use")
	}
	var locked *dataDirLockedError
	if !errors.As(err, &locked) {
		t.Fatalf("New = %v, want the data directory locked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, fmt.Sprintf("pid %d", pid)) {
		t.Fatalf("error %q does not name %s and pid %d", msg, dir, pid)
	}
}

// waitForLine reads r until a line equal to want, failing the test at EOF.
func waitForLine(t *testing.T, r io.Reader, want string) {
	t.Helper()
	s := bufio.NewScanner(r)
	for s.Scan() {
		if s.Text() == want {
			return
		}
	}
	t.Fatalf("no line %q before the end of the output (%v)", want, s.Err())
}
