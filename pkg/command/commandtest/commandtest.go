// Package commandtest checks a command's flag parsing against a table of command lines.
package commandtest

import (
	"strings"
	"testing"

	"github.com/shutter-csi/shutter/pkg/command"
)

// Case is one command line and what parsing it must give.
type Case[O any] struct {
	Name string
	Args []string
	// Env is set for the case (t.Setenv); an empty value stands for an unset variable.
	Env map[string]string
	// WantVersion: the parser reports that --version was asked for.
	WantVersion bool
	// WantErr: the parser refuses the command line with an error containing it.
	WantErr string
	// Check, when set, inspects the options of an accepted command line.
	Check func(t *testing.T, opts O)
}

// Run parses each case's arguments with parse in a subtest of its own.
func Run[O any](t *testing.T, parse command.ParseFunc[O], cases []Case[O]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			for k, v := range tc.Env {
				t.Setenv(k, v)
			}
			opts, showVersion, err := parse(tc.Args)
			if tc.WantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.WantErr) {
					t.Fatalf("err %v, want one with %q", err, tc.WantErr)
				}
				return
			}
			if err != nil || showVersion != tc.WantVersion {
				t.Fatalf("err %v, showVersion %t (want %t)", err, showVersion, tc.WantVersion)
			}
			if tc.Check != nil {
				tc.Check(t, opts)
			}
		})
	}
}
