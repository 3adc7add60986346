package main

import (
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// Issue 27 D7: --rounds is capped like --sessions. `sim run --rounds
// 100000000` built a 10 GB script while ignoring SIGTERM; now it is a usage
// error before anything is built.
func TestSimRoundsCapped(t *testing.T) {
	for _, args := range [][]string{{"--rounds", "100000000"}, {"--rounds", "33"}} {
		if _, err := parseCmd(NewCmdSimRun, args...); cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "at most 32") {
			t.Errorf("sim run %v: %v, want a usage error naming the bound", args, err)
		}
		if _, err := parseCmd(NewCmdSimServe, args...); cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "want 1 to 32") {
			t.Errorf("sim serve %v: %v, want a usage error naming the bound", args, err)
		}
	}
	mustParse(t, NewCmdSimRun, "--rounds", "32")
	mustParse(t, NewCmdSimServe, "--rounds", "32")
}
