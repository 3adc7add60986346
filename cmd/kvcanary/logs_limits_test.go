package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// Negative --limit and --year are usage errors (issue 19 item 13): the
// error alone, without the usage (main adds the pointer to --help).
func TestLogsScanRejectsNegativeFlags(t *testing.T) {
	for _, args := range [][]string{{"-", "--limit", "-1"}, {"-", "--year", "-2026"}} {
		_, errOut, err := runLogsScan(t, args, "x\n")
		if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), args[1]) || strings.Contains(errOut, "Usage:") {
			t.Errorf("%v: exit %d, %v", args, cmdutil.ExitCode(err), err)
		}
	}
	if _, err := parseCmd(NewCmdChecksumCompare, "a", "b", "--limit", "-3"); cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Errorf("checksum compare --limit -3: exit %d, %v", cmdutil.ExitCode(err), err)
	}
}

// logs scan finds the violation canary report finds on a line over 1 MiB
// (issue 19 item 13: logs scan skipped the line, canary report parsed its head).
func TestLongViolationLineFoundByBoth(t *testing.T) {
	v := "[2026-11-29 08:00:06 TP0] kv_canary violation: launch_tag=HEAD_K_FULL fail_reason=chain_hash slot_idx=1 position=2 stored_token=3 expected_token=4 stored_chain_hash=0x1 expected_aux=0x2 "
	path := filepath.Join(t.TempDir(), "decode.log")
	if err := os.WriteFile(path, []byte("[2026-11-29 08:00:05 TP0] Decode batch. #running-req: 1\n"+v+strings.Repeat("pad ", 1<<19)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runLogsScan(t, []string{path, "--json"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		CanaryViolations int64 `json:"canary_violations"`
		LongLines        int64 `json:"long_lines"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.CanaryViolations != 1 || sum.LongLines != 1 {
		t.Errorf("logs scan: %d violations, %d long lines; want 1, 1", sum.CanaryViolations, sum.LongLines)
	}
	ios, _, _, _ := cmdutil.Test()
	err = canaryReportRun(&CanaryReportOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Path: path})
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Errorf("canary report: exit %d (%v), want 1", cmdutil.ExitCode(err), err)
	}
}
