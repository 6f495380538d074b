package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shutter-csi/shutter/test/testenv"
)

// timeStuck builds kubectl-shutter and times `kubectl shutter stuck -A` with every snapshot
// present, with its peak RSS.
func (b *bench) timeStuck(ctx context.Context) (map[string]float64, error) {
	bin := filepath.Join(b.dir, "bin", "kubectl-shutter")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/kubectl-shutter")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build kubectl-shutter: %w\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "stuck", "-A", "--kubeconfig", b.cluster.Kubeconfig)
	cmd.Stdout, cmd.Stderr = nil, os.Stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("kubectl shutter stuck -A: %w", err)
	}
	out := map[string]float64{"stuck_all_s": took.Seconds(), "load": loadAverage()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		out["stuck_all_peak_rss_mib"] = float64(ru.Maxrss) / 1024
		out["stuck_all_cpu_s"] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	b.progress("  kubectl shutter stuck -A took %.2fs (peak RSS %.0f MiB)", took.Seconds(), out["stuck_all_peak_rss_mib"])
	return out, nil
}
