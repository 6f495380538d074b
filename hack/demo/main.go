// Command demo is `make demo`: on a local control plane it installs Shutter's Helm chart, runs
// the three components as local processes with the tokens of the chart's ServiceAccounts, takes
// a snapshot of a volume, restores it, checks the data byte for byte, deletes everything and
// prints a report. hack/demo.sh builds the tools and runs it.
//
//	go run ./hack/demo -tools DIR [-keep]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

func main() {
	tools := flag.String("tools", "", "folder with etcd, kube-apiserver, kube-controller-manager and helm (hack/build-tools.sh)")
	keep := flag.Bool("keep", false, "keep the state folder (logs, kubeconfigs) after the run")
	flag.Parse()
	if *tools == "" {
		fmt.Fprintln(os.Stderr, "demo: -tools is required; run it through `make demo`")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{tools: *tools, started: time.Now()}
	err := d.run(ctx, *keep)
	d.report(err)
	if err != nil {
		os.Exit(1)
	}
}

// demo holds the run's state and the report lines.
type demo struct {
	tools   string
	dir     string
	started time.Time
	steps   []step
	facts   [][2]string

	cluster *cluster.Cluster
	chart   stack.Chart
	stack   *stack.Stack
}

type step struct {
	name     string
	duration time.Duration
	err      error
}

// do runs one step with visible progress and records it for the report.
func (d *demo) do(name string, fn func() error) error {
	fmt.Fprintf(os.Stderr, "demo: %-58s ", name+" ...")
	start := time.Now()
	err := fn()
	s := step{name: name, duration: time.Since(start), err: err}
	d.steps = append(d.steps, s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAILED after %s\n", round(s.duration))
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(os.Stderr, "ok (%s)\n", round(s.duration))
	return nil
}

func (d *demo) fact(key, format string, args ...any) {
	d.facts = append(d.facts, [2]string{key, fmt.Sprintf(format, args...)})
}

func (d *demo) run(ctx context.Context, keep bool) (err error) {
	if d.dir, err = os.MkdirTemp("", "shutter-demo-"); err != nil {
		return err
	}
	defer d.cleanup(keep)
	bin := filepath.Join(d.dir, "bin")
	steps := []struct {
		name string
		fn   func() error
	}{
		{"build snapshot-controller, csi-snapshotter, hostpath-driver", func() error { return stack.Build(ctx, testenv.RepoRoot(), bin) }},
		{"start local control plane (etcd, apiserver, controller-manager)", func() error { return d.startCluster(ctx) }},
		{"helm install the chart (CRDs, RBAC, ServiceAccounts, classes)", func() error { return d.install(ctx) }},
		{"start the components with the chart's ServiceAccount tokens", func() error { return d.startStack(ctx, bin) }},
	}
	for _, s := range steps {
		if err := d.do(s.name, s.fn); err != nil {
			return err
		}
	}
	return d.snapshotRestore(ctx)
}

func (d *demo) startCluster(ctx context.Context) error {
	c, err := cluster.Start(ctx, cluster.Options{Dir: filepath.Join(d.dir, "cluster"), BinDir: d.tools,
		// The chart's hostpath driver pod is privileged, as a real node needs for mounts.
		APIServerArgs: []string{"--allow-privileged=true"}})
	if err != nil {
		return err
	}
	d.cluster = c
	d.fact("API server", "%s", c.URL)
	return nil
}

func (d *demo) install(ctx context.Context) error {
	d.chart = stack.Chart{Helm: filepath.Join(d.tools, "helm"), Dir: filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter"),
		Release: "shutter", Namespace: "shutter-system"}
	if err := d.chart.Install(ctx, d.cluster.Kubeconfig); err != nil {
		return err
	}
	d.fact("chart", "release %s in namespace %s; controller runs as ServiceAccount %s, sidecar as %s",
		d.chart.Release, d.chart.Namespace, d.chart.ControllerServiceAccount(), d.chart.HostpathServiceAccount())
	return nil
}

func (d *demo) startStack(ctx context.Context, bin string) error {
	s, err := stack.Start(ctx, stack.Options{Dir: filepath.Join(d.dir, "stack"), BinDir: bin,
		Admin: d.cluster.Config, Chart: d.chart})
	if err != nil {
		return err
	}
	d.stack = s
	return nil
}

// cleanup stops whatever still runs and removes the state folder unless asked to keep it.
func (d *demo) cleanup(keep bool) {
	if d.stack != nil {
		d.stack.Stop()
	}
	if d.cluster != nil {
		d.cluster.Stop()
	}
	if keep {
		fmt.Fprintf(os.Stderr, "demo: state, logs and kubeconfigs kept in %s\n", d.dir)
		return
	}
	if err := os.RemoveAll(d.dir); err != nil {
		fmt.Fprintf(os.Stderr, "demo: remove %s: %v\n", d.dir, err)
	}
}

func (d *demo) report(err error) {
	fmt.Println()
	fmt.Println("Shutter demo report")
	fmt.Println("===================")
	for i, s := range d.steps {
		status := "ok"
		if s.err != nil {
			status = "FAILED: " + s.err.Error()
		}
		fmt.Printf("%2d. %-62s %8s  %s\n", i+1, s.name, round(s.duration), status)
	}
	fmt.Println()
	for _, f := range d.facts {
		fmt.Printf("%-22s %s\n", f[0]+":", f[1])
	}
	fmt.Printf("%-22s %s\n", "total:", round(time.Since(d.started)))
	if err != nil {
		fmt.Printf("\nerror: %v\n", err)
		var tail interface{ Tail(int) string }
		if d.stack != nil && !errors.As(err, &tail) {
			for _, p := range d.stack.Processes() {
				fmt.Printf("\n--- %s log tail ---\n%s\n", p.Name, p.Tail(15))
			}
		}
	} else {
		fmt.Println("\nThe restored volume holds exactly the data written before the snapshot.")
	}
	fmt.Println(verdict(d.steps, err))
}

// verdict is the demo's last line, the same as hack/demo-node.sh's: `result: PASS`, or
// `result: FAIL (<step>)` naming the step that failed.
func verdict(steps []step, err error) string {
	if err == nil {
		return "result: PASS"
	}
	failed := "prepare the state folder"
	for _, s := range steps {
		if s.err != nil {
			failed = s.name
		}
	}
	return "result: FAIL (" + failed + ")"
}

func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}
