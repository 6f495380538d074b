package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Process is one Shutter component running as a local process, with its output in a log file.
// It can be killed (SIGKILL, as a crash) and started again with the same command line.
type Process struct {
	// Name names the process in logs and errors; its log is Dir/<Name>.log.
	Name string
	Path string
	Args []string
	Dir  string
	// Env holds extra NAME=value pairs on top of this process's environment.
	Env []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// LogPath is the file holding the process's output, across restarts.
func (p *Process) LogPath() string { return filepath.Join(p.Dir, p.Name+".log") }

// Start starts the process; its output is appended to its log. It dies with the caller.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exitedLocked() {
		return fmt.Errorf("%s is already running", p.Name)
	}
	log, err := os.OpenFile(p.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "=== %s starting at %s: %s %v\n", p.Name, time.Now().Format(time.RFC3339Nano), p.Path, p.Args)
	cmd := exec.Command(p.Path, p.Args...)
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		log.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *Process) exitedLocked() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Running tells whether the process was started and has not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exitedLocked()
}

// Exited returns a non-nil error once the process has ended, with the end of its log.
func (p *Process) Exited() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || !p.exitedLocked() {
		return nil
	}
	return fmt.Errorf("%s exited (%v); log tail:\n%s", p.Name, p.err, p.Tail(30))
}

// Kill ends the process with SIGKILL, as a crash would, and waits until it is gone.
func (p *Process) Kill() { p.signal(syscall.SIGKILL, 0) }

// Stop asks the process to end with SIGTERM and kills it after grace.
func (p *Process) Stop(grace time.Duration) { p.signal(syscall.SIGTERM, grace) }

func (p *Process) signal(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		select {
		case <-done:
			return
		case <-time.After(grace):
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	<-done
}

// Restart kills the process and starts it again.
func (p *Process) Restart() error {
	p.Kill()
	return p.Start()
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.LogPath())
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Build compiles Shutter's three commands into dir with the Go toolchain on PATH.
func Build(ctx context.Context, root, dir string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/",
		"./cmd/snapshot-controller", "./cmd/csi-snapshotter", "./cmd/hostpath-driver")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// Pid is the process id of the running process, or 0.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exitedLocked() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Wait waits until the process has ended and returns how: nil for exit status 0.
func (p *Process) Wait() error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return errors.New(p.Name + " was never started")
	}
	<-done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
