package main

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
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

// The human reports of the five report commands on fixed inputs, on a
// terminal and in a pipe (one file where both must print the same table).
// Their exit codes are asserted as well: a golden file is the text, not the
// verdict.
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

func TestGoldenCanaryReport(t *testing.T) {
	bad := cleanReplay(77)
	bad.Changed = append(bad.Changed, hook.PageChange{Page: 33, Owner: "req-2\x1b[31m", Before: 9, After: 10})
	bad.Running = append(bad.Running, "req-2\x1b[31m")
	missing := cleanReplay(78)
	missing.Changed = missing.Changed[:2]
	path := writeCanaryBundle(t, []hook.CanaryPages{cleanReplay(76), bad, missing})
	for _, tty := range []bool{true, false} {
		out, _, err := runCanaryReport(t, path, tty, false)
		if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
			t.Fatalf("exit %d (%v), want 1", cmdutil.ExitCode(err), err)
		}
		assertGolden(t, "canary-report-overwrite", out, map[string]string{filepath.Dir(path): "TMP"})
	}
}

func TestGoldenGraphDiffReport(t *testing.T) {
	ninf := float32(math.Inf(-1))
	stale := []float32{0, 1, 2, 3, 4, 5, ninf, ninf}
	noisy := []float32{0, 1, 2, 3.004, 4, 5, 6, 7}
	path := writeGraphDiffBundle(t, hook.RunConfig{CUDAGraph: hook.Bool(true)}, []hook.Event{
		gdSample(1, "r1", "s1", noisy),
		gdSample(2, "r2\x1b[31m", "s2", stale),
		gdSample(3, "r3", "s2", stale),
		{Kind: hook.KindSession, Body: &hook.Session{ID: "s2", Outcome: hook.OutcomeLeak}},
	})
	for _, tty := range []bool{true, false} {
		out, _, err := runGraphDiffReport(t, path, tty, false)
		if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
			t.Fatalf("exit %d (%v), want 1", cmdutil.ExitCode(err), err)
		}
		assertGolden(t, "graphdiff-report-divergent-"+ttyName(tty), out, map[string]string{filepath.Dir(path): "TMP"})
	}
}

func TestGoldenAB(t *testing.T) {
	cfg := hook.RunConfig{Engine: "sim", IndexKDtype: "bf16", CUDAGraph: hook.Bool(true), MultiStreamOverlap: hook.Bool(true), Sessions: 40, Rounds: 4, Concurrency: 40}
	off := cfg
	off.MultiStreamOverlap = hook.Bool(false)
	a := writeABBundle(t, "on.kvtrace", cfg, 1, 40, 8, 30, 0)
	b := writeABBundle(t, "off.kvtrace", off, 1, 40, 0, 30, 5)
	out, _, err := runAB(t, a, b)
	if err != nil {
		t.Fatalf("ab is a report and exits 0: %v", err)
	}
	assertGolden(t, "ab-multi-stream-overlap", out, map[string]string{filepath.Dir(a): "TMP-A", filepath.Dir(b): "TMP-B"})
}

func TestGoldenLogsScan(t *testing.T) {
	out, _, err := runLogsScan(t, []string{"-"}, logsFixture)
	if err != nil {
		t.Fatal(err)
	}
	assertGolden(t, "logs-scan-sglang", out, nil)
}
