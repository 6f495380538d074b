package hostpath

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// quiescer stops the processes that use a group snapshot's member volumes
// while the members are copied, so that no write lands in one member's copy
// and not in another's: the members show one instant.
//
// Invariants:
//   - Every stop is undone: when the copies end, when they fail or panic,
//     when the request is cancelled, when the driver stops serving, and at
//     the latest Options.GroupSnapshotQuiesceTimeout after the first stop.
//     What is stopped is written to a journal before it is stopped, and a
//     restarted driver resumes whatever a killed one left stopped.
//   - Nothing is stopped that the scan does not attribute to a member
//     (procScan), and nothing someone else had stopped is resumed.
//   - Sessions of concurrent group snapshots share what they stop: a
//     target is resumed when the last session holding it ends.
type quiescer struct {
	enabled bool
	timeout time.Duration
	// find returns the targets that stop every process using paths and the
	// number of those processes; tests replace it.
	find func(paths []string) ([]target, int, error)
	// journal is the file that lists what is stopped.
	journal string
	proc    string

	mu       sync.Mutex
	held     map[string]*heldTarget
	sessions map[*quiesceSession]bool
}

type heldTarget struct {
	t    target
	refs int
	ours bool
}

// maxQuiesceRounds bounds the scans that look for processes forked
// between a scan and the stop.
const maxQuiesceRounds = 10

// newQuiescer returns the driver's quiescer; it scans /proc.
func newQuiescer(opts Options) *quiescer {
	q := &quiescer{
		enabled: opts.GroupSnapshotQuiesce, timeout: opts.GroupSnapshotQuiesceTimeout,
		journal: quiesceJournal(opts.DataDir), proc: "/proc",
		held: map[string]*heldTarget{}, sessions: map[*quiesceSession]bool{},
	}
	scan := procScan{proc: q.proc, files: true}
	q.find = func(paths []string) ([]target, int, error) {
		users, err := scan.users(paths)
		if err != nil || len(users) == 0 {
			return nil, 0, err
		}
		return newCgroupPlanner(q.proc).plan(users), len(users), nil
	}
	return q
}

func quiesceJournal(dataDir string) string { return filepath.Join(dataDir, "state", "quiesced.json") }

// quiesceResult is what a quiesced run stopped, and for how long.
type quiesceResult struct {
	Processes int
	Targets   int
	// Stopping is the time from the first scan until every process was
	// stopped; Frozen the time from the first stop to the resume.
	Stopping time.Duration
	Frozen   time.Duration
}

// run runs jobs concurrently while every process that uses paths is
// stopped, and resumes them as soon as the jobs end. It returns the jobs'
// errors, and err when the processes could not be stopped or had to be
// resumed before the jobs ended (timeout, ctx), so that the jobs' results
// do not show one instant. A panicking job resumes the processes at once;
// run then panics with its value once the other jobs are done.
func (q *quiescer) run(ctx context.Context, paths []string, jobs []func() error) (res quiesceResult, errs []error, err error) {
	if !q.enabled {
		errs, p := runJobs(jobs, func() {})
		rethrow(p)
		return res, errs, nil
	}
	s := q.newSession(ctx)
	defer func() { res.Frozen = s.end("the group snapshot failed") }()
	begin := time.Now()
	if res.Processes, err = s.stopUsers(ctx, paths); err != nil {
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
		return res, errs, status.Errorf(codes.Unavailable, "writers of the volumes were resumed after %v (%s) before the copy finished; "+
			"the copies would not show one instant (see --group-snapshot-quiesce-timeout)", res.Frozen.Round(time.Millisecond), reason)
	}
	return res, errs, nil
}

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
	q      *quiescer
	logger klog.Logger
	done   chan struct{}

	mu      sync.Mutex
	keys    []string
	started time.Time
	ended   bool
	reason  string
	frozen  time.Duration
}

func (q *quiescer) newSession(ctx context.Context) *quiesceSession {
	s := &quiesceSession{q: q, logger: klog.FromContext(ctx), done: make(chan struct{})}
	q.mu.Lock()
	q.sessions[s] = true
	q.mu.Unlock()
	return s
}

// stopUsers stops every process that uses paths and waits until all are
// stopped, scanning again until a scan finds nothing new (a process may
// fork between a scan and the stop). It returns how many processes use
// paths.
func (s *quiesceSession) stopUsers(ctx context.Context, paths []string) (int, error) {
	for range maxQuiesceRounds {
		if err := ctx.Err(); err != nil {
			return 0, status.FromContextError(err).Err()
		}
		targets, n, err := s.q.find(paths)
		if err != nil {
			return 0, status.Errorf(codes.Internal, "find the volumes' writers: %v", err)
		}
		fresh, err := s.hold(ctx, targets)
		if err != nil {
			return 0, err
		}
		if fresh == 0 {
			return n, nil
		}
		if err := s.waitStopped(ctx); err != nil {
			return 0, err
		}
	}
	return 0, status.Errorf(codes.Unavailable, "processes using the volumes kept appearing after %d scans", maxQuiesceRounds)
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
		s.end("quiesce timeout")
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
		s.logger.Error(err, "Resuming quiesced processes failed", "targets", len(s.keys))
	}
	if s.reason != "" && len(s.keys) > 0 {
		s.logger.Info("Resumed quiesced processes before the copy finished", "reason", s.reason,
			"targets", len(s.keys), "frozenFor", s.frozen, "limit", s.q.timeout)
	}
	return s.frozen
}

// acquire takes a hold on t, stopping it if no session holds it yet. The
// journal names t before it is stopped.
func (q *quiescer) acquire(t target) error {
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
	return err
}

func (q *quiescer) stopped(key string) (bool, error) {
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
func (q *quiescer) release(s *quiesceSession) error {
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

// endAll ends every session, for a driver that stops serving.
func (q *quiescer) endAll() {
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
func (q *quiescer) writeJournal() error {
	if len(q.held) == 0 {
		if err := os.Remove(q.journal); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove quiesce journal: %w", err)
		}
		return nil
	}
	recs := make([]heldRecord, 0, len(q.held))
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

// recover resumes what the journal of a driver that died while quiescing
// lists, then removes the journal.
func (q *quiescer) recover(ctx context.Context) error {
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
	logger := klog.FromContext(ctx)
	for _, r := range recs {
		logger.Info("Resuming processes a previous driver left quiesced", "target", r)
		if err := resumeRecord(q.proc, r); err != nil {
			return err
		}
	}
	return os.Remove(q.journal)
}
