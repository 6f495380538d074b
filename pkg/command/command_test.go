package command

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/shutter-csi/shutter/pkg/version"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		wantVersion bool
		wantErr     string
		wantName    string
	}{
		{name: "flags", args: []string{"--name=x", "--v=0"}, wantName: "x"},
		{name: "version wins over stray arguments", args: []string{"--version", "extra"}, wantVersion: true},
		{name: "stray argument", args: []string{"--name=x", "extra"}, wantErr: "unexpected arguments: [extra]"},
		{name: "unknown flag", args: []string{"--colour=red"}, wantErr: "flag provided but not defined"},
		{name: "help", args: []string{"--help"}, wantErr: flag.ErrHelp.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(&bytes.Buffer{})
			name := fs.String("name", "", "a flag of the command")
			showVersion, err := Parse(fs, tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || showVersion != tc.wantVersion || *name != tc.wantName {
				t.Fatalf("err %v, showVersion %t, --name %q", err, showVersion, *name)
			}
		})
	}
}

// TestParseRegistersKlogFlags: the klog flags (here -v) are documented next to the command's own.
func TestParseRegistersKlogFlags(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var help bytes.Buffer
	fs.SetOutput(&help)
	if _, err := Parse(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v", err)
	}
	for _, f := range []string{"-version", "-v value", "-logtostderr"} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("--help does not document %s:\n%s", f, help.String())
		}
	}
}

type options struct{ name string }

func parseName(args []string) (options, bool, error) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	var o options
	fs.StringVar(&o.name, "name", "", "")
	showVersion, err := Parse(fs, args)
	if err == nil && !showVersion && o.name == "" {
		err = errors.New("--name is required")
	}
	return o, showVersion, err
}

func TestExecute(t *testing.T) {
	oldVersion, oldCommit := version.Version, version.Commit
	t.Cleanup(func() { version.Version, version.Commit = oldVersion, oldCommit })
	version.Version, version.Commit = "v1.2.3", "abc123"
	runErr := errors.New("backend gone")
	for _, tc := range []struct {
		name       string
		args       []string
		runErr     error
		wantCode   int
		wantRun    bool
		wantStdout string
		wantStderr string
	}{
		{name: "runs", args: []string{"--name=x"}, wantCode: ExitOK, wantRun: true},
		{name: "run fails", args: []string{"--name=x"}, runErr: runErr, wantCode: ExitError, wantRun: true},
		{name: "version", args: []string{"--version"}, wantCode: ExitOK, wantStdout: "tool v1.2.3 (commit abc123)\n"},
		{name: "help", args: []string{"--help"}, wantCode: ExitOK},
		{name: "refused", args: nil, wantCode: ExitUsage,
			wantStderr: "tool: --name is required\nRun 'tool --help' for usage.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			ran := false
			code := Execute("tool", tc.args, &stdout, &stderr, parseName, func(ctx context.Context, o options) error {
				ran = true
				if o.name != "x" {
					t.Errorf("run got %+v", o)
				}
				if ctx.Err() != nil {
					t.Errorf("context already ended: %v", ctx.Err())
				}
				return tc.runErr
			})
			if code != tc.wantCode || ran != tc.wantRun || stdout.String() != tc.wantStdout || stderr.String() != tc.wantStderr {
				t.Errorf("code %d (want %d), ran %t (want %t), stdout %q (want %q), stderr %q (want %q)",
					code, tc.wantCode, ran, tc.wantRun, stdout.String(), tc.wantStdout, stderr.String(), tc.wantStderr)
			}
		})
	}
}
