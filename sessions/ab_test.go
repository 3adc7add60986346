package sessions

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

func abBaseCfg() hook.RunConfig {
	return hook.RunConfig{Engine: "sglang", Model: "DeepSeek-V4-Flash", IndexKDtype: "bf16", CUDAGraph: hook.Bool(true), CUDAGraphMaxBS: 32,
		MultiStreamOverlap: hook.Bool(true), Disaggregation: "pd", Sessions: 80, Rounds: 4, Concurrency: 80, Seed: 1}
}

func abHost(name string, gpus int) hook.HostInfo {
	h := hook.HostInfo{Hostname: name}
	for i := 0; i < gpus; i++ {
		h.GPUs = append(h.GPUs, hook.GPUInfo{Index: i, Name: "RTX PRO 6000"})
	}
	return h
}

func abConfoundNames(cs []Confound) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func abFindConfound(cs []Confound, name string) (Confound, bool) {
	for _, c := range cs {
		if c.Name == name {
			return c, true
		}
	}
	return Confound{}, false
}

// The seeds' first A/B: bf16 baseline ran 6 rounds, the fp8 bisect run 4.
func TestSeedsRoundsConfound(t *testing.T) {
	a := abBaseCfg()
	a.Rounds = 6
	b := abBaseCfg()
	b.IndexKDtype = "fp8"
	A := statsRunSpec{cfg: a, host: abHost("pd", 8), tool: "v1", outcomes: outcome.Counts{Done: 8, MaxRounds: 58, Leak: 14}, rounds: 6, running: []int{60}, usage: 0.3}.stats("bf16.kvtrace")
	B := statsRunSpec{cfg: b, host: abHost("pd", 8), tool: "v1", outcomes: outcome.Counts{Done: 77, NoTool: 1, Error: 2}, rounds: 4, running: []int{58}, usage: 0.3}.stats("fp8.kvtrace")
	r := Compare(A, B, CompareOptions{})
	if r.FlagUnderTest == nil || r.FlagUnderTest.Name != "index_k_dtype" || r.FlagUnderTest.A != "bf16" || r.FlagUnderTest.B != "fp8" {
		t.Fatalf("flag under test = %+v", r.FlagUnderTest)
	}
	c, ok := abFindConfound(r.Confounds, "rounds")
	if !ok || c.A != 6 || c.B != 4 || !strings.Contains(c.Note, "6 vs 4 rounds") {
		t.Fatalf("rounds confound missing: %+v", r.Confounds)
	}
	if got := abConfoundNames(r.Confounds); len(got) != 1 {
		t.Errorf("confounds = %v, want only rounds", got)
	}
	// Equal rounds: the confound goes away.
	b.Rounds, a.Rounds = 4, 4
	A = statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 66, Leak: 14}, rounds: 4}.stats("a")
	B = statsRunSpec{cfg: b, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("b")
	if _, ok := abFindConfound(Compare(A, B, CompareOptions{}).Confounds, "rounds"); ok {
		t.Error("rounds confound with equal rounds")
	}
}

// The seeds' second caveat: fp8 may finish faster, so its peak concurrency is
// lower — fewer chances for a concurrency bug.
func TestSeedsPeakConcurrencyConfound(t *testing.T) {
	a, b := abBaseCfg(), abBaseCfg()
	b.IndexKDtype = "fp8"
	A := statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 66, Leak: 14}, rounds: 4, running: []int{20, 37, 30}, usage: 0.5}.stats("bf16")
	B := statsRunSpec{cfg: b, outcomes: outcome.Counts{MaxRounds: 79, NoTool: 1}, rounds: 4, running: []int{12, 24, 20}, usage: 0.5}.stats("fp8")
	r := Compare(A, B, CompareOptions{})
	c, ok := abFindConfound(r.Confounds, "peak_running_req")
	if !ok || c.A != 37 || c.B != 24 || !strings.Contains(c.Note, "run B's peak concurrency is 35% lower (24 vs 37)") {
		t.Fatalf("peak concurrency confound: %+v", r.Confounds)
	}
	// Within 20%: not a confound.
	B = statsRunSpec{cfg: b, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4, running: []int{31}, usage: 0.5}.stats("fp8")
	if _, ok := abFindConfound(Compare(A, B, CompareOptions{}).Confounds, "peak_running_req"); ok {
		t.Error("37 vs 31 (16%) flagged")
	}
}

// The seeds' third: fp8 ran on the 8-GPU PD setup, bf16 on a 4-GPU single server.
func TestSeedsHardwareConfound(t *testing.T) {
	a, b := abBaseCfg(), abBaseCfg()
	a.Disaggregation = "none"
	b.IndexKDtype = "fp8"
	A := statsRunSpec{cfg: a, host: abHost("single", 4), tool: "v1", outcomes: outcome.Counts{MaxRounds: 77, NoTool: 3}, rounds: 4, running: []int{60}, usage: 1.0, retracts: []int{3}}.stats("bf16-single")
	B := statsRunSpec{cfg: b, host: abHost("pd-decode", 8), tool: "v1", outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4, running: []int{58}, usage: 0.26}.stats("fp8-pd")
	r := Compare(A, B, CompareOptions{Flag: "index_k_dtype"})
	names := strings.Join(abConfoundNames(r.Confounds), ",")
	for _, want := range []string{"disaggregation", "gpu_count", "host", "peak_token_usage", "retractions"} {
		if !strings.Contains(names, want) {
			t.Errorf("confound %q missing from %s", want, names)
		}
	}
	if c, _ := abFindConfound(r.Confounds, "gpu_count"); c.A != 4 || c.B != 8 || !strings.Contains(c.Note, "different hardware") {
		t.Errorf("gpu_count = %+v", c)
	}
	if c, _ := abFindConfound(r.Confounds, "retractions"); !strings.Contains(c.Note, "run A only") || !strings.Contains(c.Note, "non-causal") {
		t.Errorf("retractions = %+v", c)
	}
	if r.FlagUnderTest == nil || r.FlagUnderTest.Name != "index_k_dtype" {
		t.Errorf("flag under test = %+v", r.FlagUnderTest)
	}
	if c, _ := abFindConfound(r.Confounds, "disaggregation"); !strings.Contains(c.Note, "besides the flag under test") {
		t.Errorf("disaggregation = %+v", c)
	}
}

func TestMoreThanOneFlagWithoutName(t *testing.T) {
	a, b := abBaseCfg(), abBaseCfg()
	b.CUDAGraphMaxBS = 64
	b.MultiStreamOverlap = hook.Bool(false)
	A := statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 66, Leak: 14}, rounds: 4}.stats("a")
	B := statsRunSpec{cfg: b, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("b")
	r := Compare(A, B, CompareOptions{})
	if r.FlagUnderTest != nil || len(r.DifferingFlags) != 2 {
		t.Fatalf("flag under test %+v, diffs %+v", r.FlagUnderTest, r.DifferingFlags)
	}
	if got := strings.Join(abConfoundNames(r.Confounds), ","); got != "cuda_graph_max_bs,multi_stream_overlap" {
		t.Errorf("confounds = %s", got)
	}
	r = Compare(A, B, CompareOptions{Flag: "multi_stream_overlap"})
	if r.FlagUnderTest == nil || r.FlagUnderTest.Name != "multi_stream_overlap" || len(r.Confounds) != 1 || r.Confounds[0].Name != "cuda_graph_max_bs" {
		t.Errorf("named flag: %+v %+v", r.FlagUnderTest, r.Confounds)
	}
	r = Compare(A, B, CompareOptions{Flag: "index_k_dtype"})
	if r.FlagUnderTest != nil || !strings.Contains(strings.Join(r.Notes, "\n"), `"index_k_dtype" has the same value`) {
		t.Errorf("absent named flag: %+v %v", r.FlagUnderTest, r.Notes)
	}
}

func TestOtherConfounds(t *testing.T) {
	a, b := abBaseCfg(), abBaseCfg()
	b.Concurrency, b.Model, b.Engine = 40, "Qwen3-8B", "vllm"
	a.Extra = map[string]string{"attention-backend": "fa3"}
	b.Extra = map[string]string{"attention-backend": "flashinfer"}
	ha, hb := abHost("x", 4), abHost("x", 4)
	hb.GPUs[0].Name = "H200"
	A := statsRunSpec{cfg: a, host: ha, tool: "v1", outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("a")
	B := statsRunSpec{cfg: b, host: hb, tool: "v2", outcomes: outcome.Counts{MaxRounds: 40}, rounds: 4}.stats("b")
	rep := Compare(A, B, CompareOptions{})
	if rep.FlagUnderTest == nil || rep.FlagUnderTest.Name != "extra.attention-backend" || rep.FlagUnderTest.A != "fa3" || rep.FlagUnderTest.B != "flashinfer" {
		t.Errorf("the one differing flag (an extra) is not the flag under test: %+v", rep.FlagUnderTest)
	}
	names := strings.Join(abConfoundNames(rep.Confounds), ",")
	for _, want := range []string{"sessions", "concurrency", "model", "engine", "gpu_model", "tool_version"} {
		if !strings.Contains(names, want) {
			t.Errorf("confound %q missing from %s", want, names)
		}
	}
	if strings.Contains(names, "host") || strings.Contains(names, "gpu_count") {
		t.Errorf("same abHost/count flagged: %s", names)
	}
	// Scheduler data in one run only.
	A = statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4, running: []int{5}}.stats("a")
	B = statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("b")
	r := Compare(A, B, CompareOptions{})
	if got := strings.Join(abConfoundNames(r.Confounds), ","); got != "sched_data" {
		t.Errorf("confounds = %s", got)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "no engine flag differs") {
		t.Errorf("notes = %v", r.Notes)
	}
}

// Tool time and step pacing are workload, not engine flags: a difference is
// a confound with a note, and an unknown value ("", an older bundle or a
// real engine) is not a difference.
func TestToolTimeAndStepTimeConfounds(t *testing.T) {
	a, b := abBaseCfg(), abBaseCfg()
	a.ToolTime, b.ToolTime = "0s", "1.5s-6s"
	a.StepTime, b.StepTime = "0s", "25ms"
	A := statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("a")
	B := statsRunSpec{cfg: b, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("b")
	rep := Compare(A, B, CompareOptions{})
	if rep.FlagUnderTest != nil || len(rep.DifferingFlags) != 0 {
		t.Errorf("workload settings taken for engine flags: %+v %+v", rep.FlagUnderTest, rep.DifferingFlags)
	}
	tt, ok := abFindConfound(rep.Confounds, "tool_time")
	if !ok || tt.A != "0s" || tt.B != "1.5s-6s" || !strings.Contains(tt.Note, "cuda-graph-max-bs") {
		t.Errorf("tool_time confound %+v in %v", tt, abConfoundNames(rep.Confounds))
	}
	if st, ok := abFindConfound(rep.Confounds, "step_time"); !ok || st.A != "0s" || st.B != "25ms" {
		t.Errorf("step_time confound %+v in %v", st, abConfoundNames(rep.Confounds))
	}
	a.ToolTime, a.StepTime = "", ""
	A = statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("a")
	if got := abConfoundNames(Compare(A, B, CompareOptions{}).Confounds); len(got) != 0 {
		t.Errorf("unknown tool and step time compared as different: %v", got)
	}
}

// The seeds' red herring: 3 retractions matched 3 no_tool sessions, yet the
// PD decode node corrupted 15% with zero retractions.
func TestRetractionCorrelationNotes(t *testing.T) {
	a, b := abBaseCfg(), abBaseCfg()
	b.MultiStreamOverlap = hook.Bool(false)
	A := statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 68, Leak: 12}, rounds: 4, running: []int{24}, usage: 0.26}.stats("pd-decode")
	B := statsRunSpec{cfg: b, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4, running: []int{60}, usage: 1.0, retracts: []int{2, 1}}.stats("small-pool")
	r := Compare(A, B, CompareOptions{})
	notes := strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, "retractions occurred in a run with no corruption (run B: 3 requests retracted, 0/80 sessions corrupted): not causal evidence") {
		t.Errorf("clean-run retraction note missing: %v", r.Notes)
	}
	if !strings.Contains(notes, "run A corrupted 12/80 sessions without a single retraction") {
		t.Errorf("corruption-without-retraction note missing: %v", r.Notes)
	}
	if !strings.Contains(r.Verdict, "B corrupts significantly less than A") {
		t.Errorf("verdict = %s", r.Verdict)
	}
}

func TestABJSONContract(t *testing.T) {
	a := abBaseCfg()
	a.Rounds = 6
	b := abBaseCfg()
	b.IndexKDtype = "fp8"
	A := statsRunSpec{cfg: a, outcomes: outcome.Counts{Done: 8, MaxRounds: 58, Leak: 14}, rounds: 6, wall: 300 * time.Second}.stats("bf16")
	B := statsRunSpec{cfg: b, outcomes: outcome.Counts{Done: 77, NoTool: 1, Error: 2}, rounds: 4}.stats("fp8")
	r := Compare(A, B, CompareOptions{})
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		A         map[string]any   `json:"a"`
		B         map[string]any   `json:"b"`
		FisherP   *float64         `json:"fisher_p"`
		Confounds []map[string]any `json:"confounds"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, side := range []map[string]any{m.A, m.B} {
		for _, k := range []string{"sessions", "rounds", "outcomes", "corrupted_sessions", "corruption_rate", "wilson95", "wall_seconds", "rates"} {
			if _, ok := side[k]; !ok {
				t.Errorf("side lacks %q: %s", k, raw)
			}
		}
	}
	if m.A["wall_seconds"].(float64) != 300 || m.A["rounds"].(float64) != 6 {
		t.Errorf("side a: %v", m.A)
	}
	if m.FisherP == nil || *m.FisherP <= 0 || *m.FisherP >= 0.05 {
		t.Errorf("fisher_p = %v", m.FisherP)
	}
	if len(m.Confounds) == 0 || m.Confounds[0]["name"] != "rounds" || m.Confounds[0]["a"].(float64) != 6 || m.Confounds[0]["b"].(float64) != 4 || m.Confounds[0]["note"] == "" {
		t.Errorf("confounds = %v", m.Confounds)
	}
	leak := m.A["rates"].(map[string]any)["leak"].(map[string]any)
	if leak["count"].(float64) != 14 || leak["rate"].(float64) != 0.175 {
		t.Errorf("leak rate = %v", leak)
	}
}

func TestWriteText(t *testing.T) {
	a, b := abBaseCfg(), abBaseCfg()
	b.IndexKDtype = "fp8"
	A := statsRunSpec{cfg: a, outcomes: outcome.Counts{Done: 8, MaxRounds: 58, Leak: 14}, rounds: 4}.stats("bf16\x1b[31m.kvtrace")
	B := statsRunSpec{cfg: b, outcomes: outcome.Counts{MaxRounds: 79, NoTool: 1}, rounds: 4}.stats("fp8.kvtrace")
	var buf bytes.Buffer
	if err := Compare(A, B, CompareOptions{}).WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"CORRUPTION sessions: 14/80 = 18% (leak=14 no_tool=0 error=0 intact[done/maxrounds]=66)",
		"CORRUPTION sessions: 1/80 = 1% (leak=0 no_tool=1 error=0 intact[done/maxrounds]=79)",
		"p = 0.000568", "flag under test: index_k_dtype  bf16 -> fp8", "confounds: none found",
		"verdict: B corrupts significantly less than A", `"bf16\x1b[31m.kvtrace"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("escape sequence reached the output")
	}
}

func TestFormatP(t *testing.T) {
	for p, want := range map[float64]string{0.4857142857: "0.486", 0.0005682572: "0.000568", 1.0825e-05: "1.08e-05", 1: "1", 0: "0"} {
		if got := FormatP(p); got != want {
			t.Errorf("FormatP(%v) = %q, want %q", p, got, want)
		}
	}
}

// EngineFlags is the list EngineFlagDiffs compares: a config differing in
// every engine flag yields exactly those names, in order, and IsEngineFlag
// accepts each (and extra.<key>) but nothing else.
func TestEngineFlagsComplete(t *testing.T) {
	a, b := abBaseCfg(), abBaseCfg()
	b.IndexKDtype, b.CUDAGraph, b.CUDAGraphMaxBS, b.MultiStreamOverlap = "fp8", hook.Bool(false), 64, hook.Bool(false)
	b.Disaggregation, b.MaxRunningRequests, b.PoolTokens, b.Inject = "none", 7, 1000, []string{"stale-outloc"}
	a.MaxRunningRequests, a.PoolTokens = 8, 500
	a.TPSize, b.TPSize = 1, 2
	a.Extra, b.Extra = map[string]string{"k": "u"}, map[string]string{"k": "v"}
	var names []string
	for _, d := range EngineFlagDiffs(a, b) {
		names = append(names, d.Name)
		if !IsEngineFlag(d.Name) {
			t.Errorf("IsEngineFlag(%q) = false for a name EngineFlagDiffs reports", d.Name)
		}
	}
	if got, want := strings.Join(names, ","), strings.Join(EngineFlags, ",")+",extra.k"; got != want {
		t.Errorf("diff names %s, want %s", got, want)
	}
	for _, bad := range []string{"", "rounds", "sessions", "extra.", "cuda-graph", "Index_K_Dtype"} {
		if IsEngineFlag(bad) {
			t.Errorf("IsEngineFlag(%q) = true", bad)
		}
	}
}

// Flag names from a bundle's extra config are untrusted text.
func TestWriteTextQuotesFlagNames(t *testing.T) {
	a, b := abBaseCfg(), abBaseCfg()
	a.Extra = map[string]string{"x\x1b[2J": "1"}
	b.Extra = map[string]string{"x\x1b[2J": "2"}
	b.CUDAGraphMaxBS = 64
	A := statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 70, Leak: 10}, rounds: 4}.stats("a")
	B := statsRunSpec{cfg: b, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("b")
	for _, opts := range []CompareOptions{{}, {Flag: "extra.x\x1b[2J"}} {
		var buf bytes.Buffer
		if err := Compare(A, B, opts).WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		if out := buf.String(); strings.Contains(out, "\x1b") || !strings.Contains(out, `"extra.x\x1b[2J"`) {
			t.Errorf("flag %q: escape reached the output or name not quoted:\n%s", opts.Flag, out)
		}
	}
}

// TestCompareLevelOverComparisons: a difference significant alone (p ≈
// 0.02) is not significant as one of four comparisons judged at once
// (Bonferroni: 0.0125 each); the verdict says the level it used, and a lone
// comparison's verdict keeps its words.
func TestCompareLevelOverComparisons(t *testing.T) {
	A := statsRunSpec{cfg: abBaseCfg(), outcomes: outcome.Counts{Done: 34, Leak: 6}, rounds: 4}.stats("a")
	B := statsRunSpec{cfg: abBaseCfg(), outcomes: outcome.Counts{Done: 40}, rounds: 4}.stats("b")
	alone := Compare(A, B, CompareOptions{})
	if alone.FisherP <= 0.0125 || alone.FisherP >= 0.05 {
		t.Fatalf("fixture p = %v, want between 0.0125 and 0.05", alone.FisherP)
	}
	if alone.Level != Significance || !strings.HasPrefix(alone.Verdict, "B corrupts significantly less than A") || strings.Contains(alone.Verdict, "shared") {
		t.Errorf("alone: level %v, %q", alone.Level, alone.Verdict)
	}
	four := Compare(A, B, CompareOptions{Comparisons: 4})
	if four.Level != 0.0125 || !strings.HasPrefix(four.Verdict, "no significant difference") || !strings.Contains(four.Verdict, "against 0.0125, 0.05 shared by the comparisons") {
		t.Errorf("one of four: level %v, %q", four.Level, four.Verdict)
	}
}
