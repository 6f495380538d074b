package main

import (
	"strings"
	"testing"
)

// TestReportsPrintInKeyOrder: both reports list their rows sorted by fault kind or component.
func TestReportsPrintInKeyOrder(t *testing.T) {
	var out strings.Builder
	(&report{Faults: map[string]*kindReport{"kill-sidecar": {Injected: 2}, "api-errors": {Injected: 1}, "kill-driver": {}}}).print(&out)
	assertOrder(t, out.String(), "api-errors", "kill-driver", "kill-sidecar")

	out.Reset()
	(&soakReport{Trends: map[string]map[string]trend{"sidecar": {}, "controller": {}, "driver": {}}}).print(&out)
	assertOrder(t, out.String(), "controller", "driver", "sidecar")
}

func assertOrder(t *testing.T, text string, words ...string) {
	t.Helper()
	at := -1
	for _, w := range words {
		i := strings.Index(text, w)
		if i <= at {
			t.Fatalf("%q not after the previous row in\n%s", w, text)
		}
		at = i
	}
}
