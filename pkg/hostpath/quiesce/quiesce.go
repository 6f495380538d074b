//go:build linux

// Package quiesce freezes the pods that write a group snapshot's member
// volumes while the members are copied, and makes sure every freeze is
// undone, also after a crash (quiesce.go). Pods are frozen through their
// cgroups (freeze.go): cgroup v2 cgroup.freeze or the v1 freezer. It is
// Linux-only.
package quiesce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// Quiescer freezes the pods that use a group snapshot's member volumes
// while the members are copied, so that no write lands in one member's copy
// and not in another's: the members show one instant. It is off unless
// Config.Enabled (the driver's Options.GroupSnapshotQuiesce) is set.
//
// Invariants:
//   - Only the cgroups of pods the driver itself published a member to
//     (read-write) are frozen: their UIDs come from the members' recorded
//     publish targets, never from a guess at who uses a folder.
//   - Every freeze is undone: when the copies end, when they fail or panic,
//     when the request is cancelled, when the driver stops serving, and at
//     the latest Config.Timeout after the first one.
//     What is frozen is written to a journal before it is frozen; a
//     restarted driver reads the journal before anything else and thaws
//     what a killed one left frozen, if it is still frozen by the driver
//     (same cgroup, the driver's mark). A thaw that fails stays in the
//     journal and is tried again (at the next group snapshot and start).
//   - Nothing someone else had frozen is thawed.
//   - Sessions of concurrent group snapshots share what they freeze: a
//     target is thawed when the last session holding it ends.
//   - A group snapshot whose freeze timed out maxQuiesceTimeouts times in a
//     row fails for good (FailedPrecondition), not retried forever.
type Quiescer struct {
	enabled bool
	timeout time.Duration
	// find returns the targets that stop the pods uids; tests replace it.
	find func(uids []string) ([]target, error)
	// journal is the file that lists what is stopped.
	journal string
	proc    string

	mu       sync.Mutex
	held     map[string]*heldTarget
	sessions map[*quiesceSession]bool
	// pending are journal records whose resume failed; they stay in the
	// journal until a retry succeeds.
	pending []heldRecord
	// timeouts counts the timeouts in a row of each group snapshot.
	timeouts map[string]int
}

type heldTarget struct {
	t    target
	refs int
	ours bool
}

// maxQuiesceTimeouts is how many timeouts in a row make a group snapshot's
// failure final.
const maxQuiesceTimeouts = 3

// Config configures a Quiescer.
type Config struct {
	// Enabled freezes the pods; a Quiescer that is not enabled runs the
	// jobs at once and freezes nothing.
	Enabled bool
	// Timeout bounds how long pods stay frozen for one run.
	Timeout time.Duration
	// Journal is the file that lists what is frozen, for Recover.
	Journal string
	// CgroupRoot is where the node's cgroup filesystem is mounted: the
	// unified hierarchy, or the folder holding the v1 hierarchies.
	CgroupRoot string
}

// New returns a Quiescer that finds pod cgroups below c.CgroupRoot.
func New(c Config) *Quiescer {
	return &Quiescer{
		enabled: c.Enabled, timeout: c.Timeout, journal: c.Journal, proc: "/proc",
		held: map[string]*heldTarget{}, sessions: map[*quiesceSession]bool{}, timeouts: map[string]int{},
		find: podCgroups{root: c.CgroupRoot, self: os.Getpid()}.find,
	}
}

// Result is what a quiesced run stopped, and for how long.
type Result struct {
	// Pods is the number of pods asked for, Targets the cgroups frozen.
	Pods    int
	Targets int
	// Stopping is the time from the first scan until every process was
	// stopped; Frozen the time from the first stop to the resume.
	Stopping time.Duration
	Frozen   time.Duration
}

// Run runs jobs concurrently while the pods uids are frozen, and thaws
// them as soon as the jobs end. It returns the jobs' errors, and err when
// the pods could not be frozen or had to be thawed before the jobs ended
// (timeout, ctx), so that the jobs' results do not show one instant. key
// names the group snapshot, for counting its timeouts. A panicking job
// thaws the pods at once; run then panics with its value once the other
// jobs are done.
func (q *Quiescer) Run(ctx context.Context, key string, uids []string, jobs []func() error) (res Result, errs []error, err error) {
	if !q.enabled || len(uids) == 0 {
		errs, p := runJobs(jobs, func() {})
		rethrow(p)
		return res, errs, nil
	}
	q.retryPending(ctx)
	s := q.newSession(ctx)
	defer func() { res.Frozen = s.end("the group snapshot failed") }()
	defer func() { err = q.countTimeout(key, s, err) }()
	begin := time.Now()
	res.Pods = len(uids)
	if err = s.stopUsers(ctx, uids); err != nil {
		return res, nil, err
	}
	res.Stopping = time.Since(begin)
	res.Targets = len(s.keys)
	errs, p := runJobs(jobs, func() { s.end("a copy panicked") })
	res.Frozen = s.end("")
	rethrow(p)
	if reason := s.reason; reason != "" {
		if ctx.Err() != nil {
			return res, errs, status.FromContextError(ctx.Err()).Err()
		}
		return res, errs, status.Errorf(codes.Unavailable, "the volumes' pods were thawed after %v (%s) before the copy finished; "+
			"the copies would not show one instant (see --group-snapshot-quiesce-timeout)", res.Frozen.Round(time.Millisecond), reason)
	}
	return res, errs, nil
}

// countTimeout counts a run of group snapshot key that ended by the
// timeout, and turns err into a final FailedPrecondition after
// maxQuiesceTimeouts in a row. Any other end resets the count.
func (q *Quiescer) countTimeout(key string, s *quiesceSession, err error) error {
	s.mu.Lock()
	timedOut := s.reason == reasonTimeout
	s.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if !timedOut || err == nil {
		delete(q.timeouts, key)
		return err
	}
	q.timeouts[key]++
	if n := q.timeouts[key]; n >= maxQuiesceTimeouts {
		delete(q.timeouts, key)
		return status.Errorf(codes.FailedPrecondition, "the group snapshot's copies did not finish within the quiesce timeout of %v in %d attempts "+
			"(raise --group-snapshot-quiesce-timeout, or take it without quiescing): %s", q.timeout, n, status.Convert(err).Message())
	}
	return err
}

// reasonTimeout is the reason of a session ended by its timeout.
const reasonTimeout = "quiesce timeout"

// jobPanic is a panic caught in a job, with the job's stack.
type jobPanic struct {
	value any
	stack []byte
}

// runJobs runs jobs concurrently and returns their errors and the first
// panic; onPanic runs as soon as a job panics.
func runJobs(jobs []func() error, onPanic func()) ([]error, *jobPanic) {
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	var once sync.Once
	var caught *jobPanic
	for i, job := range jobs {
		wg.Go(func() {
			defer func() {
				if v := recover(); v != nil {
					onPanic()
					once.Do(func() { caught = &jobPanic{value: v, stack: debug.Stack()} })
				}
			}()
			errs[i] = job()
		})
	}
	wg.Wait()
	return errs, caught
}

func rethrow(p *jobPanic) {
	if p != nil {
		panic(fmt.Sprintf("%v [recovered from a copy]\n%s", p.value, p.stack))
	}
}

// quiesceSession is one group snapshot's hold on stopped targets.
type quiesceSession struct {
	q      *Quiescer
	logger klog.Logger
	done   chan struct{}

	mu      sync.Mutex
	keys    []string
	started time.Time
	ended   bool
	reason  string
	frozen  time.Duration
}

func (q *Quiescer) newSession(ctx context.Context) *quiesceSession {
	s := &quiesceSession{q: q, logger: klog.FromContext(ctx), done: make(chan struct{})}
	q.mu.Lock()
	q.sessions[s] = true
	q.mu.Unlock()
	return s
}

// stopUsers freezes the cgroups of the pods uids and waits until every
// task in them has stopped. A freeze covers what the pods fork later.
func (s *quiesceSession) stopUsers(ctx context.Context, uids []string) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	targets, err := s.q.find(uids)
	if err != nil {
		return status.Errorf(codes.Internal, "find the cgroups of the volumes' pods: %v", err)
	}
	fresh, err := s.hold(ctx, targets)
	if err != nil || fresh == 0 {
		return err
	}
	if err := s.waitStopped(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		// Thawed while waiting: the targets no longer count as held.
		return s.cutShort(ctx, s.reason)
	}
	return nil
}

// hold stops the targets this session does not hold yet and returns how
// many it took; the first one starts the watchdog.
func (s *quiesceSession) hold(ctx context.Context, targets []target) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return 0, s.cutShort(ctx, s.reason)
	}
	fresh := 0
	for _, t := range targets {
		if slices.Contains(s.keys, t.key()) {
			continue
		}
		if s.started.IsZero() {
			s.started = time.Now()
			go s.watch(ctx)
		}
		s.keys = append(s.keys, t.key())
		fresh++
		if err := s.q.acquire(t); err != nil {
			return fresh, status.Errorf(codes.Internal, "stop the volumes' writers: %v", err)
		}
	}
	return fresh, nil
}

// watch ends the session when the timeout passes or ctx ends first.
func (s *quiesceSession) watch(ctx context.Context) {
	timer := time.NewTimer(s.q.timeout)
	defer timer.Stop()
	select {
	case <-timer.C:
		s.end(reasonTimeout)
	case <-ctx.Done():
		s.end("request cancelled")
	case <-s.done:
	}
}

// waitStopped polls until every held target has stopped or the session
// ended.
func (s *quiesceSession) waitStopped(ctx context.Context) error {
	s.mu.Lock()
	keys := slices.Clone(s.keys)
	s.mu.Unlock()
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		all := true
		for _, k := range keys {
			ok, err := s.q.stopped(k)
			if err != nil {
				return status.Errorf(codes.Internal, "wait for the volumes' writers to stop: %v", err)
			}
			all = all && ok
		}
		if all {
			return nil
		}
		s.mu.Lock()
		ended, reason := s.ended, s.reason
		s.mu.Unlock()
		if ended {
			return s.cutShort(ctx, reason)
		}
		time.Sleep(delay)
	}
}

// cutShort is the error for a session that ended while it was still
// stopping processes.
func (s *quiesceSession) cutShort(ctx context.Context, reason string) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Unavailable, "stopping the volumes' writers was cut short: %s (limit %v)", reason, s.q.timeout)
}

// end resumes what the session holds, once, and returns for how long it
// held anything. reason "" is a normal end; any other reason is recorded
// and logged, unless the session had ended already.
func (s *quiesceSession) end(reason string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return s.frozen
	}
	s.ended, s.reason = true, reason
	close(s.done)
	err := s.q.release(s)
	if !s.started.IsZero() {
		s.frozen = time.Since(s.started)
	}
	if err != nil {
		s.logger.Error(err, "Thawing quiesced pods failed", "targets", len(s.keys))
	}
	if s.reason != "" && len(s.keys) > 0 {
		s.logger.Info("Thawed quiesced pods before the copy finished", "reason", s.reason,
			"targets", len(s.keys), "frozenFor", s.frozen, "limit", s.q.timeout)
	}
	return s.frozen
}

// acquire takes a hold on t, stopping it if no session holds it yet. The
// journal names t before it is stopped.
func (q *Quiescer) acquire(t target) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if h, ok := q.held[t.key()]; ok {
		h.refs++
		return nil
	}
	h := &heldTarget{t: t, refs: 1}
	q.held[t.key()] = h
	if err := q.writeJournal(); err != nil {
		return err
	}
	ours, err := t.stop()
	h.ours = ours
	if err != nil || !ours {
		return err
	}
	// Again, with what identifies the freeze as the driver's (record).
	return q.writeJournal()
}

func (q *Quiescer) stopped(key string) (bool, error) {
	q.mu.Lock()
	h, ok := q.held[key]
	q.mu.Unlock()
	if !ok || !h.ours {
		return true, nil
	}
	return h.t.stopped()
}

// release drops the session's holds and resumes what no session holds
// any more; the journal is updated after the resumes. Called with s.mu.
func (q *Quiescer) release(s *quiesceSession) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.sessions, s)
	var errs []error
	for _, k := range s.keys {
		h, ok := q.held[k]
		if !ok {
			continue
		}
		if h.refs--; h.refs > 0 {
			continue
		}
		delete(q.held, k)
		if h.ours {
			errs = append(errs, h.t.resume())
		}
	}
	if len(s.keys) > 0 {
		errs = append(errs, q.writeJournal())
	}
	return errors.Join(errs...)
}

// EndAll ends every session, for a driver that stops serving.
func (q *Quiescer) EndAll() {
	q.mu.Lock()
	sessions := make([]*quiesceSession, 0, len(q.sessions))
	for s := range q.sessions {
		sessions = append(sessions, s)
	}
	q.mu.Unlock()
	for _, s := range sessions {
		s.end("driver stopping")
	}
}

// writeJournal records every held target, or removes the journal when
// none is held. A driver crash keeps the page cache, and a power failure
// leaves no process stopped, so it is not flushed. Called with q.mu.
func (q *Quiescer) writeJournal() error {
	if len(q.held) == 0 && len(q.pending) == 0 {
		if err := os.Remove(q.journal); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove quiesce journal: %w", err)
		}
		return nil
	}
	recs := slices.Clone(q.pending)
	for _, h := range q.held {
		recs = append(recs, h.t.record())
	}
	b, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	if err := state.WriteFileAtomic(q.journal, b, false); err != nil {
		return fmt.Errorf("write quiesce journal: %w", err)
	}
	return nil
}

// Recover thaws what the journal of a driver that died while quiescing
// lists. It runs first at start, before the data folder is locked and the
// state read, so that no failure there leaves pods frozen. A record that
// cannot be resumed is logged and kept in the journal for retryPending;
// the others are dropped from it.
func (q *Quiescer) Recover(ctx context.Context) error {
	b, err := os.ReadFile(q.journal)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read quiesce journal: %w", err)
	}
	var recs []heldRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		return fmt.Errorf("read quiesce journal: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = recs
	return q.resumePending(klog.FromContext(ctx))
}

// retryPending tries the resumes that failed before again.
func (q *Quiescer) retryPending(ctx context.Context) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) > 0 {
		_ = q.resumePending(klog.FromContext(ctx))
	}
}

// resumePending resumes every pending record, keeps those that fail and
// rewrites the journal. Called with q.mu.
func (q *Quiescer) resumePending(logger klog.Logger) error {
	var failed []heldRecord
	for _, r := range q.pending {
		logger.Info("Resuming what a previous group snapshot left quiesced", "target", r)
		if err := resumeRecord(q.proc, r); err != nil {
			logger.Error(err, "Resuming quiesced target failed; it stays in the journal and is tried again", "target", r)
			failed = append(failed, r)
		}
	}
	q.pending = failed
	return q.writeJournal()
}
