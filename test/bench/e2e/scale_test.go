package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCheckpointCrossing(t *testing.T) {
	b := &bench{opts: options{sc: scaleOptions{checkpoints: []int{1000, 10000}}}}
	for _, tc := range []struct {
		from, to int
		want     bool
	}{
		{from: 500, to: 1000, want: true},
		{from: 1000, to: 1500, want: false},
		{from: 9600, to: 10100, want: true},
		{from: 0, to: 500, want: false},
	} {
		if got := b.checkpoint(tc.from, tc.to); got != tc.want {
			t.Errorf("checkpoint(%d, %d) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestPlotScaleWritesPNG(t *testing.T) {
	w := func(phase string, n int, p50 float64) *wave {
		return &wave{Phase: phase, Snapshots: n, Size: 100, LatencyP50: p50, LatencyP99: 2 * p50, PerSecond: 40,
			CPUMsPerSnapshot: map[string]float64{procAPIServer: 18}, RSSMiB: map[string]float64{procController: 90, procSidecar: 40}, EtcdMiB: 30}
	}
	res := &scaleResults{Started: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), Sides: []*sideResult{
		{Name: "shutter", Create: []*wave{w("create", 100, 1), w("create", 200, 1.1)}, Delete: []*wave{w("delete", 200, 0.5), w("delete", 100, 0.4)}},
		{Name: "upstream", Create: []*wave{w("create", 100, 5)}},
	}}
	path := filepath.Join(t.TempDir(), "scale.png")
	if err := plotScale(res, path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if cfg.Width < 1000 || cfg.Height < 900 {
		t.Errorf("plot is %dx%d, want at least 1000x900 for six panels", cfg.Width, cfg.Height)
	}
}

func TestFillGapEndsWavesOnCheckpoints(t *testing.T) {
	b := &bench{opts: options{sc: scaleOptions{fill: true, wave: 500, checkpoints: []int{1000, 5000, 10000, 50000}}}}
	for _, tc := range []struct{ present, want int }{
		{present: 0, want: 0},       // below the baseline every wave is measured
		{present: 500, want: 0},     // the second wave reaches 1,000
		{present: 1000, want: 3500}, // filled to 4,500, the wave reaches 5,000
		{present: 5000, want: 4500},
		{present: 10000, want: 39500},
		{present: 50000, want: 0},
	} {
		if got := b.fillGap(tc.present); got != tc.want {
			t.Errorf("fillGap(%d) = %d, want %d", tc.present, got, tc.want)
		}
	}
	b.opts.sc.fill = false
	if got := b.fillGap(1000); got != 0 {
		t.Errorf("without -fill, fillGap(1000) = %d, want 0", got)
	}
}

func TestTrailingRun(t *testing.T) {
	names := []string{"w00000-00000", "fill-000001", "fill-000002", "w00003-00000", "w00003-00001"}
	if got := trailingRun(names, false); got != 2 {
		t.Errorf("measured tail = %d, want 2", got)
	}
	if got := trailingRun(names[:3], true); got != 2 {
		t.Errorf("filled tail = %d, want 2", got)
	}
	if got := trailingRun(names[:3], false); got != 0 {
		t.Errorf("measured tail of a filled end = %d, want 0", got)
	}
}
