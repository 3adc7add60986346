package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/sim"
)

// update rewrites the golden files: go test ./cmd/kvcanary -run Golden -update
var update = flag.Bool("update", false, "rewrite testdata/*.golden from this run")

// assertGolden compares got with testdata/NAME.golden (or writes it under
// -update). Directories in replace (temporary inputs) are shown as the
// placeholder they map to, so the file holds no machine-specific path.
func assertGolden(t *testing.T, name, got string, replace map[string]string) {
	t.Helper()
	for dir, ph := range replace {
		got = strings.ReplaceAll(got, dir, ph)
	}
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run with -update if the change is meant):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

// ttyName names the two renderings of a report.
func ttyName(tty bool) string {
	if tty {
		return "tty"
	}
	return "pipe"
}

// The human reports of the five report commands are pinned by golden files
// on fixed inputs: canary report, graphdiff report (on a terminal and in a
// pipe), ab and logs scan in their own tests (TestCanaryReportBundleOverwrite,
// TestGraphDiffReportDivergent, TestABTextAndExitCodes,
// TestLogsScanTextQuotesAndStdin), checksum compare here: the seed logs with
// a mismatched room, and a twin bundle with transfer-race (seeded, so the
// rooms and digests are fixed). Exit codes are asserted as well: a golden
// file is the text, not the verdict.
func TestGoldenChecksumCompare(t *testing.T) {
	pp, dp := seedLogs(t, 7)
	race := twinBundle(t, []string{sim.FaultTransferRace})
	for _, tty := range []bool{true, false} {
		out, _, err := runChecksumCompare(t, tty, false, pp, dp)
		if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
			t.Fatalf("seed logs, room 7 mismatched: exit %d (%v), want 1", cmdutil.ExitCode(err), err)
		}
		assertGolden(t, "checksum-compare-seedlogs", out, nil)
		out, _, err = runChecksumCompare(t, tty, false, race)
		if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
			t.Fatalf("twin transfer-race: exit %d (%v), want 1", cmdutil.ExitCode(err), err)
		}
		assertGolden(t, "checksum-compare-twin-transfer-race", out, nil)
	}
}
