package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/traces"
)

// writeABBundle records a run: corrupted leak sessions out of n, with the
// given rounds, peak running requests and retractions.
func writeABBundle(t *testing.T, name string, cfg hook.RunConfig, gpus, n, leaks, peak, retracted int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	host := hook.HostInfo{Hostname: fmt.Sprintf("node-%d", gpus)}
	for i := 0; i < gpus; i++ {
		host.GPUs = append(host.GPUs, hook.GPUInfo{Index: i, Name: "RTX PRO 6000"})
	}
	w, err := traces.Create(path, traces.Manifest{Tool: "kvcanary test", Run: name, Created: time.Unix(1_750_000_000, 0), Host: host, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ts := int64(1_750_000_000_000_000_000)
	write := func(b hook.Body) {
		ts += 1e6
		if err := w.Write(hook.Event{Kind: b.Kind(), TS: ts, Body: b}); err != nil {
			t.Fatal(err)
		}
	}
	write(&hook.Sched{Phase: "decode", RunningReq: peak, TokenUsage: 0.5})
	if retracted > 0 {
		write(&hook.Sched{Phase: "retract", Retracted: retracted})
	}
	for i := 0; i < n; i++ {
		out := hook.OutcomeMaxRounds
		if i < leaks {
			out = hook.OutcomeLeak
		}
		write(&hook.Session{ID: fmt.Sprint(i), Outcome: out, Rounds: cfg.Rounds})
	}
	write(&hook.RunEnd{WallNS: int64(10 * time.Second)})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func runAB(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runCmd(NewCmdAB, args...)
}

// abJSON runs ab --json on bundles a and b and returns its report.
func abJSON(t *testing.T, a, b string) sessions.ABReport {
	t.Helper()
	out, _, err := runAB(t, a, b, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep sessions.ABReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestABSeedsConfoundsJSON(t *testing.T) {
	bf16 := hook.RunConfig{Engine: "sglang", IndexKDtype: "bf16", CUDAGraph: hook.Bool(true), Sessions: 80, Rounds: 6, Concurrency: 80}
	fp8 := bf16
	fp8.IndexKDtype, fp8.Rounds = "fp8", 4
	a := writeABBundle(t, "bf16.kvtrace", bf16, 4, 80, 14, 37, 3)
	b := writeABBundle(t, "fp8.kvtrace", fp8, 8, 80, 1, 24, 0)
	out, _, err := runAB(t, a, b, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		A struct {
			Sessions          int `json:"sessions"`
			CorruptedSessions int `json:"corrupted_sessions"`
			Rounds            int `json:"rounds"`
		} `json:"a"`
		FisherP       float64 `json:"fisher_p"`
		FlagUnderTest struct {
			Name string `json:"name"`
		} `json:"flag_under_test"`
		Confounds []struct {
			Name string `json:"name"`
			A    any    `json:"a"`
			B    any    `json:"b"`
			Note string `json:"note"`
		} `json:"confounds"`
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.A.Sessions != 80 || rep.A.CorruptedSessions != 14 || rep.A.Rounds != 6 || rep.FlagUnderTest.Name != "index_k_dtype" {
		t.Errorf("report: %s", out)
	}
	if rep.FisherP < 0.0005 || rep.FisherP > 0.0006 {
		t.Errorf("fisher_p = %v, want ≈ 0.000568", rep.FisherP)
	}
	var names []string
	for _, c := range rep.Confounds {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "rounds,peak_running_req,retractions,gpu_count,host" {
		t.Errorf("confounds = %s", got)
	}
}

func TestABTextAndExitCodes(t *testing.T) {
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
	wantContains(t, "text", out, "CORRUPTION sessions: 8/40 = 20%", "flag under test: multi_stream_overlap  true -> false",
		"retractions occurred in a run with no corruption", "verdict: B corrupts significantly less than A")
	_, _, err = runAB(t, a, filepath.Join(t.TempDir(), "nope.kvtrace"))
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), "nope.kvtrace") {
		t.Errorf("missing bundle: %v", err)
	}
	_, _, err = runAB(t, a)
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Errorf("one arg: %v", err)
	}
	got, err := parseCmd(NewCmdAB, "x", "y", "--flag", "cuda_graph", "--json")
	if err != nil || got.PathA != "x" || got.PathB != "y" || got.Flag != "cuda_graph" || !got.JSON.JSON {
		t.Errorf("options %+v %v", got, err)
	}
	// A misspelt --flag is a usage error, not a silent "same value in both runs".
	if err := wantUsage(t, NewCmdAB, "x", "y", "--flag", "cuda-graph"); !strings.Contains(fmt.Sprint(err), "cuda-graph") {
		t.Errorf("--flag cuda-graph: %v, want it named", err)
	}
}

// damageABBundle records n sessions (leaks of them leaked, first) in three
// frames and flips four bytes in the middle one, so the reader skips that
// frame while the footer still counts its events.
func damageABBundle(t *testing.T, cfg hook.RunConfig, n, leaks int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flip.kvtrace")
	w, err := traces.Create(path, traces.Manifest{Tool: "kvcanary test", Run: "flip", Created: time.Unix(1_750_000_000, 0), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		out := hook.OutcomeMaxRounds
		if i < leaks {
			out = hook.OutcomeLeak
		}
		b := &hook.Session{ID: fmt.Sprint(i), Outcome: out, Rounds: cfg.Rounds, Excerpt: strings.Repeat(fmt.Sprint(i), 200)}
		if err := w.Write(hook.Event{Kind: b.Kind(), TS: int64(1_750_000_000_000_000_000 + i), Body: b}); err != nil {
			t.Fatal(err)
		}
		if i == n/3 || i == 2*n/3 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for at := len(good) / 2; at < len(good)-4; at++ {
		bad := append([]byte(nil), good...)
		for i := range 4 {
			bad[at+i] ^= 0xff
		}
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := runStatsFromBundle(path)
		if err == nil && r.Skipped > 0 && r.HaveFooter && !r.Truncated && r.Outcomes.Total() > 0 && r.Outcomes.Total() < n {
			return path
		}
	}
	t.Fatal("no four flipped bytes damaged the middle frame alone")
	return ""
}

// abRoot runs ab as under the root command (usage and errors silenced), so
// stdout holds the report alone whatever the exit.
func abRoot(args ...string) (string, string, error) {
	c := newTestCLI()
	cmd := NewCmdAB(c.F, nil)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := c.exec(cmd, args...)
	return c.Out.String(), c.ErrOut.String(), err
}

// A run whose bundle lost a frame is compared on what was readable, but the
// report says which run lost how many events, that sessions may be missing,
// and exits 4, even when the difference is significant: the lost sessions
// could change it.
func TestABPartialWhenABundleLostEvents(t *testing.T) {
	cfg := hook.RunConfig{Engine: "sim", IndexKDtype: "bf16", Sessions: 60, Rounds: 2}
	a := writeABBundle(t, "base.kvtrace", cfg, 1, 60, 30, 30, 0)
	b := damageABBundle(t, cfg, 60, 0)
	out, errOut, err := abRoot(a, b)
	if cmdutil.ExitCode(err) != cmdutil.ExitNoData {
		t.Fatalf("ab over a damaged run: exit %d (%v), want 4", cmdutil.ExitCode(err), err)
	}
	wantContains(t, "text", out, "verdict: B corrupts significantly less than A",
		"PARTIAL: run B lost events, sessions may be missing", "\nPARTIAL: ", "run B ("+b+"): the footer counts 60 events, ",
		"events unreadable (1 damaged records skipped); sessions may be missing")
	if !strings.Contains(errOut, "damaged records skipped") {
		t.Errorf("stderr %q", errOut)
	}
	js, _, err := abRoot(a, b, "--json")
	if cmdutil.ExitCode(err) != cmdutil.ExitNoData {
		t.Fatalf("--json: exit %d, want 4", cmdutil.ExitCode(err))
	}
	var rep sessions.ABReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Status != sessions.StatusPartial || len(rep.Partial) != 1 || !strings.HasPrefix(rep.Partial[0], "run B") || rep.FisherP >= rep.Level {
		t.Errorf("--json status %q partial %q p %g", rep.Status, rep.Partial, rep.FisherP)
	}
	// Two whole runs stay a plain report.
	if _, _, err := abRoot(a, a); err != nil {
		t.Errorf("two whole runs: %v, want exit 0", err)
	}
}

// A run without session outcomes is no data: no verdict, exit 4.
func TestABNoSessionsIsNoData(t *testing.T) {
	cfg := hook.RunConfig{Engine: "sim", IndexKDtype: "bf16", Sessions: 20, Rounds: 2}
	a := writeABBundle(t, "a.kvtrace", cfg, 1, 20, 1, 30, 0)
	b := writeABBundle(t, "b.kvtrace", cfg, 1, 0, 0, 30, 0)
	out, _, err := abRoot(a, b)
	if cmdutil.ExitCode(err) != cmdutil.ExitNoData || !strings.Contains(out, "verdict: no verdict: a run has no session outcomes") {
		t.Errorf("exit %d (%v), out %q; want 4 and no verdict", cmdutil.ExitCode(err), err, out)
	}
	js, _, err := abRoot(a, b, "--json")
	var rep sessions.ABReport
	if cmdutil.ExitCode(err) != cmdutil.ExitNoData || json.Unmarshal([]byte(js), &rep) != nil || rep.Status != sessions.StatusNoData || rep.Message == "" {
		t.Errorf("--json: exit %d, status %q message %q", cmdutil.ExitCode(err), rep.Status, rep.Message)
	}
}
