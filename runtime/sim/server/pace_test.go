package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/runtime/sim/server/servertest"
)

// TestEngineStepTimeIsTheEnginesClock: the default pacing is the step the
// engine's simulated clock (event timestamps) already assumes.
func TestEngineStepTimeIsTheEnginesClock(t *testing.T) {
	e, err := sim.NewEngine(servertest.Config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	before := e.Now()
	e.Step()
	e.Step()
	if got := e.Now().Sub(before); got != 2*server.EngineStepTime {
		t.Fatalf("two engine steps advance the clock by %v, want 2×EngineStepTime = %v", got, 2*server.EngineStepTime)
	}
}

func TestStepTimeRejectsNegative(t *testing.T) {
	if _, err := server.New(server.Options{Config: servertest.Config(), StepTime: -time.Millisecond}); err == nil || !strings.Contains(err.Error(), "step time") {
		t.Fatalf("negative step time: err %v, want one naming the step time", err)
	}
}

// servePaced serves one tool-call round at step time d and returns the
// wall time the request took and the pacing statistics.
func servePaced(t *testing.T, d time.Duration) (time.Duration, server.PaceStats, sim.Stats) {
	t.Helper()
	tw := startQuiet(t, server.Options{StepTime: d})
	start := time.Now()
	resp, body := servertest.Post(t, tw.URL, `{"model":"m","messages":[{"role":"user","content":"Task 1: pacing. tool rounds: 1"}],"tools":`+servertest.ToolsJSON+`}`)
	took := time.Since(start)
	// Stop the loop before reading its counters: Run may still be between
	// the step that finished the request and the bookkeeping after it.
	tw.Stop()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	return took, tw.Server.Pace(), tw.Server.Stats()
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
