package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// TestRootUnknownCommand: an unknown command or subcommand is a usage error
// (exit 2, usage on stderr); a bare group prints its help and exits 0.
func TestRootUnknownCommand(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		code    int
		errWant string // substring of the returned error
		stderr  string // substring of stderr
		stdout  string // substring of stdout
	}{
		{[]string{"nosuchcmd"}, cmdutil.ExitUsage, `unknown command "nosuchcmd"`, "Usage:", ""},
		{[]string{"probe", "nosuch"}, cmdutil.ExitUsage, `unknown command "nosuch" for "kvcanary probe"`, "Usage:", ""},
		{[]string{"trace", "nosuch"}, cmdutil.ExitUsage, `unknown command "nosuch" for "kvcanary trace"`, "Usage:", ""},
		{[]string{"version", "--bogus"}, cmdutil.ExitUsage, "unknown flag: --bogus", "Usage:", ""},
		{[]string{"probe"}, cmdutil.ExitOK, "", "", "Available Commands:"},
		{nil, cmdutil.ExitOK, "", "", "Available Commands:"},
	} {
		ios, _, out, errOut := cmdutil.Test()
		f := &cmdutil.Factory{IO: ios, Ctx: context.Background(), Now: time.Now}
		root := NewCmdRoot(f)
		root.SetArgs(tc.args)
		err := root.ExecuteContext(context.Background())
		if got := cmdutil.ExitCode(err); got != tc.code {
			t.Errorf("%q: exit %d (err %v), want %d", tc.args, got, err, tc.code)
			continue
		}
		if tc.errWant != "" && (err == nil || !strings.Contains(err.Error(), tc.errWant)) {
			t.Errorf("%q: err %v, want it to contain %q", tc.args, err, tc.errWant)
		}
		if !strings.Contains(errOut.String(), tc.stderr) {
			t.Errorf("%q: stderr %q, want %q", tc.args, errOut.String(), tc.stderr)
		}
		if !strings.Contains(out.String(), tc.stdout) {
			t.Errorf("%q: stdout %q, want %q", tc.args, out.String(), tc.stdout)
		}
	}
}
