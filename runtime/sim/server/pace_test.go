package server

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/sim"
)

// TestEngineStepTimeIsTheEnginesClock: the default pacing is the step the
// engine's simulated clock (event timestamps) already assumes.
func TestEngineStepTimeIsTheEnginesClock(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Instruments = sim.Instruments{}
	e, err := sim.NewEngine(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := e.Now()
	e.Step()
	e.Step()
	if got := e.Now().Sub(before); got != 2*EngineStepTime {
		t.Fatalf("two engine steps advance the clock by %v, want 2×EngineStepTime = %v", got, 2*EngineStepTime)
	}
}

func TestStepTimeRejectsNegative(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Instruments = sim.Instruments{}
	if _, err := New(Options{Config: cfg, StepTime: -time.Millisecond}); err == nil || !strings.Contains(err.Error(), "step time") {
		t.Fatalf("negative step time: err %v, want one naming the step time", err)
	}
}

// servePaced serves one tool-call round at step time d and returns the
// wall time the request took and the pacing statistics.
func servePaced(t *testing.T, d time.Duration) (time.Duration, PaceStats, sim.Stats) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Instruments = sim.Instruments{}
	cfg.MultiStreamOverlap = false
	s, err := New(Options{Config: cfg, StepTime: d})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx)
	hs := httptest.NewServer(s.Handler())
	start := time.Now()
	resp, body := post(t, hs.URL, `{"model":"m","messages":[{"role":"user","content":"Task 1: pacing. tool rounds: 1"}],"tools":`+toolsJSON+`}`)
	took := time.Since(start)
	// Stop the loop before reading its counters: Run may still be between
	// the step that finished the request and the bookkeeping after it.
	hs.Close()
	cancel()
	s.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	return took, s.Pace(), s.Stats()
}

// TestStepTimePacesTheEngine: with a step time, a request that took N engine
// steps took at least N-1 step times of wall time (a lower bound only: a
// busy machine makes steps slower, never faster), and the pacing statistics
// count every step Run took. Without one, nothing is counted as an overrun.
func TestStepTimePacesTheEngine(t *testing.T) {
	const d = 4 * time.Millisecond
	took, p, st := servePaced(t, d)
	if p.StepTime != d || p.Steps == 0 || p.Steps != st.Steps {
		t.Fatalf("pace %+v, engine took %d steps", p, st.Steps)
	}
	if p.MaxCompute <= 0 || p.Compute < p.MaxCompute {
		t.Errorf("pace %+v: compute times not recorded", p)
	}
	if min := time.Duration(p.Steps-1) * d; took < min {
		t.Errorf("a request of %d steps paced at %v took %v, less than %v", p.Steps, d, took, min)
	}
	t.Logf("paced: %d steps in %v (%d overran %v, slowest %v)", p.Steps, took, p.Overruns, d, p.MaxCompute)

	_, p, st = servePaced(t, 0)
	if p.StepTime != 0 || p.Overruns != 0 || p.Steps != st.Steps || p.Steps == 0 {
		t.Fatalf("unpaced: pace %+v, engine took %d steps", p, st.Steps)
	}
}
