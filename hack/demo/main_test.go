package main

import (
	"errors"
	"testing"
)

func TestVerdict(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name  string
		steps []step
		err   error
		want  string
	}{
		{name: "every step passed", steps: []step{{name: "helm install"}, {name: "helm uninstall"}}, want: "result: PASS"},
		{name: "a step failed", steps: []step{{name: "helm install"}, {name: "take a snapshot", err: boom}}, err: boom,
			want: "result: FAIL (take a snapshot)"},
		{name: "failed before any step", err: boom, want: "result: FAIL (prepare the state folder)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verdict(tt.steps, tt.err); got != tt.want {
				t.Errorf("verdict = %q, want %q", got, tt.want)
			}
		})
	}
}
