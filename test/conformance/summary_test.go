package conformance

import (
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6">
  <testsuite name="Kubernetes e2e suite">
    <testcase name="[It] External Storage [Driver: d] [Testpattern: Dynamic Snapshot (delete policy)] snapshottable [Feature:X] should a" status="passed"></testcase>
    <testcase name="[It] External Storage [Driver: d] [Testpattern: Dynamic Snapshot (delete policy)] snapshottable [Feature:X] should b" status="skipped"><skipped message="skipped - volume type is not ephemeral"></skipped></testcase>
    <testcase name="[It] External Storage [Driver: d] [Testpattern: Dynamic PV (block volmode)] multiVolume should c" status="failed"><failure message="boom"></failure></testcase>
    <testcase name="[It] External Storage [Driver: d] [Testpattern: Dynamic PV (default fs)] subPath should d" status="skipped"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] External Storage [Driver: d] [Testpattern:  (delete policy)] volumegroupsnapshotclass [Feature:Y] should e" status="passed"></testcase>
    <testcase name="[It] [sig-node] Pods should f" status="passed"></testcase>
  </testsuite>
</testsuites>`
	counts, err := Summarize(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Counts{
		"snapshottable":            {Passed: 1, Skipped: 1},
		"multiVolume":              {Failed: 1},
		"volumegroupsnapshotclass": {Passed: 1},
	}
	if len(counts) != len(want) {
		t.Errorf("suites %v, want %v", counts, want)
	}
	for name, w := range want {
		if counts[name] != w {
			t.Errorf("%s: %+v, want %+v", name, counts[name], w)
		}
	}
	var b strings.Builder
	if err := WriteSummary(&b, counts); err != nil {
		t.Fatal(err)
	}
	const table = "| suite | passed | failed | skipped |\n|---|---|---|---|\n" +
		"| multiVolume | 0 | 1 | 0 |\n| snapshottable | 1 | 0 | 1 |\n| volumegroupsnapshotclass | 1 | 0 | 0 |\n" +
		"| total | 2 | 1 | 1 |\n"
	if b.String() != table {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), table)
	}
}
