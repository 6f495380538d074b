package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// stopGrace is how long a component gets to exit after SIGTERM before it is killed.
const stopGrace = 10 * time.Second

// process is one control-plane component started by this package.
type process struct {
	name string
	spec procSpec
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// run starts a component on the host with its output in Dir/<name>.log and its pid in
// Dir/<name>.pid; env is added to the environment.
func (c *Cluster) run(opts Options, name string, args []string, env ...string) error {
	return c.runProc(opts, procSpec{name: name, dir: opts.Dir, args: args, env: env})
}

// procSpec is a component to start: binary name from Options.BinDir, the folder of its log and
// pid file, and the network namespace (a name) and mount namespace (a file) it runs in ("" for
// the host's).
type procSpec struct {
	name, dir, netns, mntns string
	args, env               []string
}

// runProc starts a component as spec says. A component of a namespace is started through
// nsenter, which enters the namespace and executes it (same process, so pid and death signal
// stay).
func (c *Cluster) runProc(opts Options, spec procSpec) error {
	logPath := filepath.Join(spec.dir, spec.name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	bin, args := filepath.Join(opts.BinDir, spec.name), spec.args
	if spec.netns != "" || spec.mntns != "" {
		enter := []string{}
		if spec.netns != "" {
			enter = append(enter, "--net="+netnsPath(spec.netns))
		}
		if spec.mntns != "" {
			enter = append(enter, "--mount="+spec.mntns)
		}
		bin, args = "nsenter", append(append(enter, "--", bin), args...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = spec.dir
	if len(spec.env) > 0 {
		cmd.Env = append(os.Environ(), spec.env...)
	}
	if opts.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		// Dies with the test binary that started it, even when that one is killed.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", spec.name, err)
	}
	p := &process{name: spec.name, spec: spec, args: spec.args, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return os.WriteFile(filepath.Join(spec.dir, spec.name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
}

// exited returns an error with the log tail when the process has ended.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); log tail:\n%s", p.name, p.err, p.tail(30))
	default:
		return nil
	}
}

func (p *process) tail(lines int) string {
	data, _ := os.ReadFile(p.log)
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	_ = os.Remove(strings.TrimSuffix(p.log, ".log") + ".pid")
}

// StopDir stops a detached control plane and its node from the pid files in its state folder,
// and cleans up after the node (see cleanNode) even when no process runs any more.
func StopDir(dir string) error {
	found := false
	for _, name := range []string{"kubelet", "kube-scheduler", "containerd", "kube-controller-manager", "kube-apiserver", "etcd"} {
		pidFile := filepath.Join(dir, name+".pid")
		data, err := os.ReadFile(pidFile)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		found = true
		pid, err := strconv.Atoi(string(bytes.TrimSpace(data)))
		if err != nil {
			return fmt.Errorf("%s: %w", pidFile, err)
		}
		stopPid(pid)
		_ = os.Remove(pidFile)
	}
	if dirs := nodeDirs(dir); len(dirs) > 0 {
		for _, d := range dirs {
			found = found || readPid(filepath.Join(d, "kubelet.pid")) > 0 || readPid(filepath.Join(d, "containerd.pid")) > 0
		}
		if err := cleanNodes(dir); err != nil {
			return err
		}
	} else if _, err := os.Stat(newNodePaths(dir).dir); err == nil {
		if err := cleanNode(dir); err != nil {
			return err
		}
	}
	if !found {
		return ErrNotRunning
	}
	return nil
}

func stopPid(pid int) {
	if syscall.Kill(pid, syscall.SIGTERM) != nil {
		return
	}
	deadline := time.Now().Add(stopGrace)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// Restart SIGKILLs the named component, as a crash would, starts it again with the same command
// line and waits until it is healthy again (etcd and kube-apiserver).
func (c *Cluster) Restart(ctx context.Context, name string) error {
	i := slices.IndexFunc(c.procs, func(p *process) bool { return p.name == name })
	if i < 0 {
		return fmt.Errorf("no %s in this cluster", name)
	}
	old := c.procs[i]
	_ = old.cmd.Process.Kill()
	<-old.done
	c.procs = slices.Delete(c.procs, i, i+1)
	if err := c.run(c.opts, name, old.args); err != nil {
		return err
	}
	// Keep the start order, so Stop still ends the API server before etcd.
	p := c.procs[len(c.procs)-1]
	c.procs = slices.Insert(slices.Delete(c.procs, len(c.procs)-1, len(c.procs)), i, p)
	switch name {
	case "etcd":
		return c.waitHealthy(ctx, c.etcdURL+"/health", nil)
	case "kube-apiserver":
		tlsConfig, err := rest.TLSConfigFor(c.Config)
		if err != nil {
			return err
		}
		return c.waitHealthy(ctx, c.URL+"/readyz", tlsConfig)
	}
	return nil
}

// Pid is the process id of the named component, or 0.
func (c *Cluster) Pid(name string) int {
	for _, p := range c.procs {
		if p.name == name {
			return p.cmd.Process.Pid
		}
	}
	return 0
}
