package graphdiff

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func sampleEv(step uint64, req, sess string, g, e []float32, k int) hook.Event {
	return hook.Event{Kind: hook.KindGraphDiffSample, Body: &hook.GraphDiffSample{
		Step: step, Request: req, Session: sess, Dtype: "bf16", Graph: g, Eager: e, K: k, SeqLen: len(e),
	}}
}

func runStart(cudaGraph bool) hook.Event {
	return hook.Event{Kind: hook.KindRunStart, Body: &hook.RunStart{Config: hook.RunConfig{CUDAGraph: hook.Bool(cudaGraph)}}}
}

func observeAll(a *Analyzer, evs ...hook.Event) []*hook.Finding {
	var out []*hook.Finding
	for _, ev := range evs {
		a.Observe(ev, func(f hook.Event) {
			if f.Kind != hook.KindFinding {
				panic("analyzer emitted a non-finding")
			}
			out = append(out, f.Body.(*hook.Finding))
		})
	}
	return out
}

func TestAnalyzerAggregates(t *testing.T) {
	base := []float32{0, 1, 2, 3, 4, 5, 6, 7}
	same := slices.Clone(base)
	noisy := slices.Clone(base)
	noisy[3] += 0.004 // within bf16 tolerance
	// Graph lost the newest two positions (masked to -Inf): selection changes.
	stale := slices.Clone(base)
	stale[6], stale[7] = float32(negInf()), float32(negInf())
	// Graph with a garbled middle: selection changes partially.
	garbled := slices.Clone(base)
	garbled[1], garbled[6] = 6.5, 1

	a := NewAnalyzer(Options{})
	fs := observeAll(a,
		runStart(true),
		sampleEv(1, "r1", "s1", same, base, 4),
		sampleEv(2, "r1", "s1", noisy, base, 4),
		sampleEv(3, "r2", "s2", stale, base, 4),
		sampleEv(4, "r3", "s2", garbled, base, 4),
		sampleEv(5, "r2", "s2", stale, base, 4),
		hook.Event{Kind: hook.KindSession, Body: &hook.Session{ID: "s2", Outcome: hook.OutcomeLeak}},
		hook.Event{Kind: hook.KindSession, Body: &hook.Session{ID: "s1", Outcome: hook.OutcomeDone}},
	)
	s := a.Result()
	if s.Samples != 5 || s.Divergent != 3 || s.DivergentRequests != 2 || s.DivergentSessions != 1 || s.DivergentSessionsLeaked != 1 {
		t.Fatalf("counts: %+v", s)
	}
	if s.RawDiffSamples != 4 {
		t.Fatalf("raw diff samples = %d, want 4", s.RawDiffSamples)
	}
	if len(fs) != 3 {
		t.Fatalf("%d findings, want 3", len(fs))
	}
	f := fs[0]
	if f.Analyzer != "graphdiff" || f.Severity != hook.SevError || f.Evidence["step"] != "3" || f.Evidence["request"] != "r2" ||
		f.Evidence["session"] != "s2" || f.Evidence["reason"] != ReasonSelection || f.Evidence["missing"] != "6,7" ||
		f.Evidence["extra"] != "2,3" || f.Evidence["missing_newest"] != "true" || f.Evidence["topk_jaccard"] != "0.333333" ||
		f.Evidence["first_diff_rank"] != "0" {
		t.Fatalf("finding: %+v", f)
	}
	if !strings.Contains(f.Summary, "missing the newest positions, from 6") {
		t.Fatalf("headline %q", f.Summary)
	}
	// The garbled sample: top-4 {4,5,6,7} vs graph {1,4,5,7}: Jaccard 3/5.
	if *s.MinTopKJaccard != 1.0/3 {
		t.Fatalf("min jaccard = %v", *s.MinTopKJaccard)
	}
	wantHist := []int{2, 1, 0, 0, 2}
	for i, b := range s.JaccardHist {
		if b.Count != wantHist[i] {
			t.Fatalf("hist bin %s = %d, want %d (%+v)", b.Label, b.Count, wantHist[i], s.JaccardHist)
		}
	}
	if s.Reasons[ReasonSelection] != 3 {
		t.Fatalf("reasons %v", s.Reasons)
	}
	if len(s.Worst) != 5 || !s.Worst[0].Divergent || s.Worst[0].Step != 3 || s.Worst[1].Step != 5 || s.Worst[2].Step != 4 || s.Worst[4].Step != 1 {
		t.Fatalf("worst order: %+v", s.Worst)
	}
	if s.MaxAbsDiffPassing <= 0 || s.MaxAbsDiffPassing > 0.01 {
		t.Fatalf("max abs diff passing = %v", s.MaxAbsDiffPassing)
	}
	if s.NoSamplesReason != "" {
		t.Fatalf("no-samples reason with samples: %q", s.NoSamplesReason)
	}
	b, err := json.Marshal(a.Result())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"samples":5`, `"divergent":3`, `"max_abs_diff":`, `"min_topk_jaccard":0.333`, `"divergent_requests":2`, `"jaccard_hist":`, `"worst":`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("summary JSON lacks %s: %s", key, b)
		}
	}
}

func TestAnalyzerNoSamplesReason(t *testing.T) {
	tests := []struct {
		name string
		evs  []hook.Event
		want string
	}{
		{"graphs off", []hook.Event{runStart(false)}, NoSamplesGraphsOff},
		{"graphs on", []hook.Event{runStart(true)}, NoSamplesNotTaken},
		{"no run.start", nil, NoSamplesUnknown},
		{"graphs unknown", []hook.Event{{Kind: hook.KindRunStart, Body: &hook.RunStart{Config: hook.RunConfig{Engine: "remote"}}}}, NoSamplesGraphUnknown},
	}
	for _, tt := range tests {
		a := NewAnalyzer(Options{})
		observeAll(a, tt.evs...)
		s := a.Result()
		if s.Samples != 0 || s.NoSamplesReason != tt.want || s.MinTopKJaccard != nil {
			t.Errorf("%s: %+v", tt.name, s)
		}
		b, err := json.Marshal(s)
		if err != nil || !strings.Contains(string(b), `"min_topk_jaccard":null`) || !strings.Contains(string(b), `"worst":[]`) {
			t.Errorf("%s: JSON %s (%v)", tt.name, b, err)
		}
	}
}

func TestAnalyzerFindingCap(t *testing.T) {
	a := NewAnalyzer(Options{})
	a.maxFindings = 2
	g, e := []float32{1, 0}, []float32{0, 1}
	fs := observeAll(a, sampleEv(1, "a", "", g, e, 1), sampleEv(2, "b", "", g, e, 1), sampleEv(3, "c", "", g, e, 1))
	s := a.Result()
	if len(fs) != 2 || s.FindingsSuppressed != 1 || s.Divergent != 3 {
		t.Fatalf("findings %d, suppressed %d, divergent %d", len(fs), s.FindingsSuppressed, s.Divergent)
	}
}

func TestAnalyzerIgnoresOtherEvents(t *testing.T) {
	a := NewAnalyzer(Options{})
	fs := observeAll(a,
		hook.Event{Kind: hook.KindReplay, Body: &hook.Replay{Step: 1}},
		hook.Event{Kind: hook.KindGraphDiffSample, Body: (*hook.GraphDiffSample)(nil)},
		hook.Event{Kind: hook.KindRunStart, Body: (*hook.RunStart)(nil)},
	)
	if len(fs) != 0 || a.Result().Samples != 0 {
		t.Fatal("non-sample events changed the analyzer")
	}
	if a.Name() != "graphdiff" {
		t.Fatalf("name %q", a.Name())
	}
}

func negInf() float64 { return math.Inf(-1) }

// TestAnalyzerSelectionOnly: samples that carry selections but no logit rows
// (a sparse emission policy) are judged on the selections and counted, so a
// report can say the vector statistics cover fewer samples.
func TestAnalyzerSelectionOnly(t *testing.T) {
	base := []float32{0, 1, 2, 3, 4, 5, 6, 7}
	sel := func(step uint64, g, e []int32) hook.Event {
		return hook.Event{Kind: hook.KindGraphDiffSample, Body: &hook.GraphDiffSample{
			Step: step, Request: "r1", Session: "s1", Dtype: "bf16", TopKGraph: g, TopKEager: e, K: len(e), SeqLen: 8}}
	}
	a := NewAnalyzer(Options{})
	fs := observeAll(a, runStart(true),
		sampleEv(1, "r1", "s1", slices.Clone(base), base, 4),
		sel(2, []int32{7, 6, 5, 4}, []int32{7, 6, 5, 4}),
		sel(3, []int32{7, 6, 5, 0}, []int32{7, 6, 5, 4}),
	)
	s := a.Result()
	if s.Samples != 3 || s.SelectionOnly != 2 || s.Divergent != 1 || len(fs) != 1 || s.Reasons[ReasonSelection] != 1 {
		t.Fatalf("samples %d selection-only %d divergent %d findings %d reasons %v", s.Samples, s.SelectionOnly, s.Divergent, len(fs), s.Reasons)
	}
}
