package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

func TestGraphDiffReportFlags(t *testing.T) {
	wantOptions(t, NewCmdGraphDiff, []string{"report", "run.kvtrace", "--json"}, func(o *GraphDiffReportOptions) bool {
		return o.Path == "run.kvtrace" && o.JSON.JSON
	})
	wantUsage(t, NewCmdGraphDiff, "report")
}

func writeGraphDiffBundle(t *testing.T, cfg hook.RunConfig, evs []hook.Event) string {
	t.Helper()
	all := append([]hook.Event{{Kind: hook.KindRunStart, Body: &hook.RunStart{Tool: "test", Config: cfg}}}, evs...)
	return writeBundle(t, traces.Manifest{Run: "t"}, all...)
}

func gdSample(step uint64, req, sess string, graph []float32) hook.Event {
	eager := []float32{0, 1, 2, 3, 4, 5, 6, 7}
	return hook.Event{Kind: hook.KindGraphDiffSample, Body: &hook.GraphDiffSample{
		Step: step, Request: req, Session: sess, Dtype: "bf16", Graph: graph, Eager: eager, K: 4, SeqLen: 8,
	}}
}

func runGraphDiffReport(t *testing.T, path string, tty, asJSON bool) (string, string, error) {
	t.Helper()
	ios, _, out, errOut := cmdutil.Test()
	ios.SetTTY(tty, tty)
	err := graphDiffReportRun(&GraphDiffReportOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: asJSON}, Path: path})
	return out.String(), errOut.String(), err
}

func TestGraphDiffReportDivergent(t *testing.T) {
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
			t.Fatalf("tty=%v: exit %d (%v), want 1\n%s", tty, cmdutil.ExitCode(err), err, out)
		}
		assertGolden(t, "graphdiff-report-divergent-"+ttyName(tty), out, nil)
		want := "GRAPH≠EAGER: 2/3 samples diverge (2 requests, 1 session of which 1 leaked); worst top-k Jaccard 0.33\n"
		if !strings.HasPrefix(out, want) {
			t.Fatalf("tty=%v headline:\n%s", tty, out)
		}
		if !strings.Contains(out, "reasons: selection 2") || !strings.Contains(out, "2 (newest)") || !strings.Contains(out, "[0,0.5)") {
			t.Fatalf("tty=%v body:\n%s", tty, out)
		}
		if strings.Contains(out, "\x1b") || !strings.Contains(out, `"r2\x1b[31m"`) {
			t.Fatalf("untrusted request id not quoted:\n%q", out)
		}
		if tty != strings.Contains(out, "█") {
			t.Fatalf("tty=%v: histogram bars only on a terminal:\n%s", tty, out)
		}
	}
	out, _, err := runGraphDiffReport(t, path, false, true)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("json: exit %d", cmdutil.ExitCode(err))
	}
	var rep struct {
		GraphDiff map[string]any   `json:"graphdiff"`
		Findings  []map[string]any `json:"findings"`
		Total     int              `json:"findings_total"`
		Bundle    map[string]any   `json:"bundle"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	g := rep.GraphDiff
	if g["samples"] != float64(3) || g["divergent"] != float64(2) || g["divergent_requests"] != float64(2) ||
		g["min_topk_jaccard"].(float64) > 0.34 || g["max_abs_diff"].(float64) <= 0 || rep.Total != 2 || len(rep.Findings) != 2 ||
		rep.Bundle["graphdiff_samples"] != float64(3) {
		t.Fatalf("json: %s", out)
	}
	if ev := rep.Findings[0]["evidence"].(map[string]any); ev["missing"] != "6,7" || ev["step"] != "2" {
		t.Fatalf("finding evidence: %v", ev)
	}
}

func TestGraphDiffReportClean(t *testing.T) {
	noisy := []float32{0, 1, 2, 3.004, 4, 5, 6, 7}
	path := writeGraphDiffBundle(t, hook.RunConfig{CUDAGraph: hook.Bool(true)}, []hook.Event{gdSample(1, "r1", "s1", noisy)})
	out, _, err := runGraphDiffReport(t, path, false, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.HasPrefix(out, "graph = eager within tolerance: 0/1 samples diverge (1 differ by rounding, max abs diff 0.004") {
		t.Fatalf("headline:\n%s", out)
	}
}

func TestGraphDiffReportNoSamples(t *testing.T) {
	// The twin knows its settings: the no-data sentence is followed by why.
	path := writeGraphDiffBundle(t, hook.RunConfig{CUDAGraph: hook.Bool(false), Engine: "sim"}, nil)
	out, _, err := runGraphDiffReport(t, path, false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitNoData {
		t.Fatalf("exit %d (%v)\n%s", cmdutil.ExitCode(err), err, out)
	}
	if !strings.HasPrefix(out, "no data: "+path+" holds no graphdiff.sample events (1 event read): ") ||
		!strings.HasSuffix(out, "\nno captured replay to compare: CUDA graphs are disabled\n") {
		t.Fatalf("report:\n%s", out)
	}
	out, _, _ = runGraphDiffReport(t, path, false, true)
	if !strings.Contains(out, `"detail": "no captured replay to compare: CUDA graphs are disabled"`) ||
		!strings.Contains(out, `"status": "no-data"`) {
		t.Fatalf("json:\n%s", out)
	}
}

func TestGraphDiffReportUnreadable(t *testing.T) {
	_, _, err := runGraphDiffReport(t, filepath.Join(t.TempDir(), "missing.kvtrace"), false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput {
		t.Fatalf("missing file: exit %d (%v), want 3", cmdutil.ExitCode(err), err)
	}
	junk := filepath.Join(t.TempDir(), "junk.kvtrace")
	if err := os.WriteFile(junk, []byte("this is not a bundle\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = runGraphDiffReport(t, junk, false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput {
		t.Fatalf("junk file: exit %d (%v), want 3", cmdutil.ExitCode(err), err)
	}
}

// Dropped events and a note naming no instrument bear on graphdiff: the
// clean report is partial (text, --json) and exits 4; a note naming only
// another instrument does not.
func TestGraphDiffReportPartial(t *testing.T) {
	noisy := []float32{0, 1, 2, 3.004, 4, 5, 6, 7}
	path := writeGraphDiffBundle(t, hook.RunConfig{CUDAGraph: hook.Bool(true)}, []hook.Event{gdSample(1, "r1", "s1", noisy),
		{Kind: hook.KindRunEnd, Src: hook.Source{Proc: "sglang", PID: 9}, Body: &hook.RunEnd{Dropped: 5}}})
	out, _, err := runGraphDiffReport(t, path, false, false)
	if code := cmdutil.ExitCode(err); code != cmdutil.ExitNoData {
		t.Fatalf("exit %d (%v), want 4\n%s", code, err, out)
	}
	if !strings.Contains(out, "\nPARTIAL:") || !strings.Contains(out, "sglang pid 9: dropped 5 events") {
		t.Fatalf("no partial line:\n%s", out)
	}
	out, _, _ = runGraphDiffReport(t, path, false, true)
	if !strings.Contains(out, `"status": "partial"`) || !strings.Contains(out, `"dropped": 5`) {
		t.Fatalf("json:\n%s", out)
	}
	path = writeGraphDiffBundle(t, hook.RunConfig{CUDAGraph: hook.Bool(true)}, []hook.Event{gdSample(1, "r1", "s1", noisy),
		{Kind: hook.KindRunEnd, Src: hook.Source{Proc: "sglang", PID: 9}, Body: &hook.RunEnd{Error: "canary.replay off: 2 errors"}}})
	if out, _, err := runGraphDiffReport(t, path, false, false); err != nil || strings.Contains(out, "PARTIAL") {
		t.Fatalf("exit %v:\n%s", err, out)
	}
}

// --limit sets how many worst samples are kept and listed (issue 23: canary
// report and graphdiff report lacked the flag other reports have), in the
// text table and in --json alike; the counts stay whole.
func TestGraphDiffReportLimit(t *testing.T) {
	ninf := float32(math.Inf(-1))
	stale := []float32{0, 1, 2, 3, 4, 5, ninf, ninf}
	var evs []hook.Event
	for i := range 12 {
		evs = append(evs, gdSample(uint64(i+1), fmt.Sprintf("r%d", i), "s1", stale))
	}
	path := writeGraphDiffBundle(t, hook.RunConfig{CUDAGraph: hook.Bool(true)}, evs)
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, graphdiff.DefaultWorst}, {[]string{"--limit", "3"}, 3}, {[]string{"--limit", "20"}, 12}} {
		code, out, errOut := runTest(t, append([]string{"graphdiff", "report", path, "--json"}, tc.args...)...)
		if code != cmdutil.ExitFinding {
			t.Fatalf("%q: exit %d: %s", tc.args, code, errOut)
		}
		var rep GraphDiffReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.GraphDiff.Worst) != tc.want || rep.GraphDiff.Divergent != 12 {
			t.Errorf("%q: %d worst samples (want %d), %d divergent (want 12)", tc.args, len(rep.GraphDiff.Worst), tc.want, rep.GraphDiff.Divergent)
		}
		_, text, _ := runTest(t, append([]string{"graphdiff", "report", path}, tc.args...)...)
		if rows := strings.Count(text, " s1 "); rows != tc.want {
			t.Errorf("%q: %d rows in the worst samples table, want %d:\n%s", tc.args, rows, tc.want, text)
		}
	}
}
