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
