package graphdiff_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// twinRun runs the twin with every instrument on through the graphdiff
// analyzer and returns its summary, its findings, and the sessions by outcome.
type twinOut struct {
	sum      graphdiff.Summary
	findings []*hook.Finding
	outcome  map[string]string // session id -> outcome
	res      sim.Result
}

func twinRun(t *testing.T, seed uint64, sessions, rounds int, mod func(*sim.Config)) twinOut {
	t.Helper()
	if raceEnabled {
		t.Skip("twin acceptance runs are too slow under the race detector; run without -race")
	}
	cfg := sim.DefaultConfig()
	cfg.Seed = seed
	if mod != nil {
		mod(&cfg)
	}
	w := sim.DefaultWorkload()
	w.Judge = outcome.Classifier{}.Outcome
	w.Sessions, w.Rounds = sessions, rounds
	an := graphdiff.NewAnalyzer(graphdiff.Options{})
	out := twinOut{outcome: map[string]string{}}
	pub := hook.WithAnalyzers(hook.PublishFunc(func(ev hook.Event) {
		switch b := ev.Body.(type) {
		case *hook.Finding:
			if b.Analyzer == graphdiff.AnalyzerName {
				out.findings = append(out.findings, b)
			}
		case *hook.Session:
			out.outcome[b.ID] = b.Outcome
		}
	}), an)
	res, err := sim.Run(context.Background(), cfg, w, pub)
	if err != nil {
		t.Fatal(err)
	}
	out.res = res
	out.sum = an.Result()
	return out
}

// Baseline (multi-stream race): divergent samples exist, every one is a
// changed top-k selection, and they sit on sessions the race corrupted.
func TestTwinBaselineDiverges(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		out := twinRun(t, seed, 40, 3, nil)
		s := out.sum
		t.Logf("seed %d: samples %d divergent %d requests %d sessions %d (leaked %d) raw-diff %d outcomes %v",
			seed, s.Samples, s.Divergent, s.DivergentRequests, s.DivergentSessions, s.DivergentSessionsLeaked, s.RawDiffSamples, out.res.Outcomes)
		if s.Samples == 0 || s.Divergent == 0 {
			t.Fatalf("seed %d: baseline shows no divergence: %+v", seed, s)
		}
		if s.Reasons[graphdiff.ReasonSelection] != s.Divergent {
			t.Errorf("seed %d: divergent samples without a changed selection: %v", seed, s.Reasons)
		}
		for _, f := range out.findings {
			if f.Evidence["missing_count"] == "0" && f.Evidence["extra_count"] == "0" {
				t.Fatalf("seed %d: finding without a selection change: %+v", seed, f)
			}
		}
		// Concentration: divergent samples are a small share of all samples,
		// on few requests; the corrupted sessions of the run include them.
		if s.Divergent*4 > s.Samples {
			t.Errorf("seed %d: %d/%d samples divergent; the race should hit a minority", seed, s.Divergent, s.Samples)
		}
		// Concentration: leaked sessions carry the divergent samples. Count
		// divergent samples on leaked sessions against all divergent samples,
		// and leaked sessions with a divergence against all leaked sessions.
		onLeaked := 0
		for _, f := range out.findings {
			if out.outcome[f.Evidence["session"]] == hook.OutcomeLeak {
				onLeaked++
			}
		}
		leaked, leakedDiv := 0, 0
		div := divergentSessions(out.findings)
		for id, o := range out.outcome {
			if o == hook.OutcomeLeak {
				leaked++
				if div[id] {
					leakedDiv++
				}
			}
		}
		t.Logf("seed %d: %d/%d divergent samples on leaked sessions; %d/%d leaked sessions had a divergent sample; %d/%d sessions leaked",
			seed, onLeaked, len(out.findings), leakedDiv, leaked, leaked, len(out.outcome))
		if leaked > 0 && len(out.findings) > 0 &&
			float64(onLeaked)/float64(len(out.findings)) <= float64(leaked)/float64(len(out.outcome)) {
			t.Errorf("seed %d: divergence is not concentrated on leaked sessions (%d/%d samples vs %d/%d sessions leaked)",
				seed, onLeaked, len(out.findings), leaked, len(out.outcome))
		}
	}
}

func divergentSessions(fs []*hook.Finding) map[string]bool {
	m := map[string]bool{}
	for _, f := range fs {
		if s := f.Evidence["session"]; s != "" {
			m[s] = true
		}
	}
	return m
}

// Without the race (overlap off) the tolerance absorbs the eager path's
// rounding: zero divergent samples although raw differences are non-zero.
func TestTwinNoOverlapWithinTolerance(t *testing.T) {
	out := twinRun(t, 1, 20, 3, func(c *sim.Config) { c.MultiStreamOverlap = false })
	s := out.sum
	if s.Samples == 0 || s.Divergent != 0 {
		t.Fatalf("overlap off: %+v", s)
	}
	if s.RawDiffSamples == 0 || s.MaxAbsDiff == 0 {
		t.Fatalf("overlap off: no raw differences at all, the tolerance was not exercised: %+v", s)
	}
}

// fp8 logits live outside the graph arena, so the race cannot touch them:
// zero divergent samples, although the eager rerun's accumulation order makes
// raw float differences non-zero (the tolerance is exercised on fp8 too).
func TestTwinFP8NoDivergence(t *testing.T) {
	out := twinRun(t, 1, 20, 3, func(c *sim.Config) { c.IndexKDtype = "fp8" })
	s := out.sum
	t.Logf("fp8: samples %d divergent %d raw-diff %d max-abs-diff %g", s.Samples, s.Divergent, s.RawDiffSamples, s.MaxAbsDiff)
	if s.Samples == 0 || s.Divergent != 0 {
		t.Fatalf("fp8: %+v", s)
	}
	if s.RawDiffSamples == 0 || s.MaxAbsDiff == 0 {
		t.Fatalf("fp8: no raw differences at all, the tolerance was not exercised: %+v", s)
	}
}

// No captured graphs: nothing to compare, and the summary says why.
func TestTwinDisableCUDAGraphNoSamples(t *testing.T) {
	out := twinRun(t, 1, 10, 2, func(c *sim.Config) { c.DisableCUDAGraph = true })
	s := out.sum
	if s.Samples != 0 || s.NoSamplesReason != graphdiff.NoSamplesGraphsOff {
		t.Fatalf("disable-cuda-graph: %+v", s)
	}
}

// A stale captured sequence length: selections miss the newest positions.
func TestTwinStaleSeqLenMissesNewest(t *testing.T) {
	out := twinRun(t, 1, 20, 2, func(c *sim.Config) {
		c.MultiStreamOverlap = false // isolate the injected fault from the race
		c.Inject = []string{sim.FaultStaleSeqLen}
	})
	s := out.sum
	if s.Divergent == 0 {
		t.Fatalf("stale-seqlen: no divergence: %+v", s)
	}
	sel := 0
	for _, f := range out.findings {
		if f.Evidence["reason"] != graphdiff.ReasonSelection {
			continue
		}
		sel++
		if f.Evidence["missing_newest"] != "true" {
			t.Fatalf("stale-seqlen: selection change not missing the newest positions: %+v", f.Evidence)
		}
		n, _ := strconv.Atoi(f.Evidence["missing_count"])
		if n == 0 {
			t.Fatalf("stale-seqlen: selection finding with nothing missing: %+v", f.Evidence)
		}
	}
	if sel == 0 {
		t.Fatalf("stale-seqlen: no selection findings among %d", len(out.findings))
	}
}
