package main

import (
	"encoding/json"
	"fmt"
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
