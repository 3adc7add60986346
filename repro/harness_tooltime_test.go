package repro_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/runtime/sim/server/servertest"
)

// batchLog counts the twin's decode tokens by step mode from its replay
// events (published on the engine goroutine, read after the run).
type batchLog struct {
	mu           sync.Mutex
	graphTokens  int
	eagerTokens  int
	graphSteps   int
	eagerSteps   int
	peakBS       int
	peakGraphBS  int
	graphBuckets map[int]int
}

func (b *batchLog) Publish(ev hook.Event) {
	r, ok := ev.Body.(*hook.Replay)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.peakBS = max(b.peakBS, r.BatchSize)
	if r.Mode == "graph" {
		b.graphSteps++
		b.graphTokens += r.BatchSize
		b.peakGraphBS = max(b.peakGraphBS, r.BatchSize)
		if b.graphBuckets == nil {
			b.graphBuckets = map[int]int{}
		}
		b.graphBuckets[r.Bucket]++
		return
	}
	b.eagerSteps++
	b.eagerTokens += r.BatchSize
}

// toolTimeRun serves a paced twin (only replay events on) and drives it with
// the harness at the given tool time.
func toolTimeRun(t *testing.T, seed uint64, sessions, rounds, maxBS int, step time.Duration, tool repro.ToolTime) (*repro.HarnessResult, *batchLog, server.PaceStats) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Seed = seed
	cfg.Instruments = sim.Instruments{Replay: true}
	cfg.CUDAGraphMaxBS = maxBS
	log := &batchLog{}
	tw := servertest.Start(t, server.Options{Config: cfg, Publisher: log, StepTime: step})
	defer tw.Stop()
	res, err := repro.RunHarness(context.Background(), repro.HarnessOptions{URL: tw.URL, Sessions: sessions, Rounds: rounds,
		Seed: seed, ToolTime: tool, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.PerSession {
		if s.Outcome == hook.OutcomeError || s.Outcome == hook.OutcomeTimeout {
			t.Fatalf("seed %d: session %s: %s (%s)", seed, s.ID, s.Outcome, s.Reason)
		}
	}
	p := tw.Server.Pace()
	log.mu.Lock()
	defer log.mu.Unlock()
	t.Logf("seed %d tool %v: %s; steps %d (overran %d, slowest %v); graph %d steps/%d tokens (peak bs %d), eager %d steps/%d tokens, peak bs %d",
		seed, tool, res.Headline(), p.Steps, p.Overruns, p.MaxCompute, log.graphSteps, log.graphTokens, log.peakGraphBS, log.eagerSteps, log.eagerTokens, log.peakBS)
	return res, log, p
}

// TestToolTimeStaggersSessionsOnTheTwin is the mechanism behind repro's
// --tool-time, on the twin server paced like a GPU: with tools answered at
// once, sessions stay in lock-step and most decode tokens run in batches
// above cuda-graph-max-bs, eagerly, where the twin's graph race cannot
// happen; with tool time between rounds (60-240 steps, sim run's think
// time) the sessions drift apart, most tokens run as graph replays at
// batch <= max-bs, and sessions corrupt.
func TestToolTimeStaggersSessionsOnTheTwin(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: two to four paced twin runs take 8-30 s")
	}
	if raceEnabled {
		t.Skip("race detector: every twin step computes slower than the 8 ms step time (measured: all overran, some by 100x), so tool time no longer spans the steps it models; the harness's waiting is race-tested against a fake server (TestHarnessWaitsToolTime)")
	}
	const sessions, rounds, maxBS = 20, 3, 16
	const step = 8 * time.Millisecond
	tool := repro.ToolTime{Min: 60 * step, Max: 240 * step}
	paced := func(p server.PaceStats) {
		t.Helper()
		if p.Overruns*3 > p.Steps {
			t.Skipf("machine too busy: %d of %d twin steps took longer than %v to compute, so the step time did not hold", p.Overruns, p.Steps, step)
		}
	}
	graphBS := func(b *batchLog) {
		t.Helper()
		for bucket := range b.graphBuckets {
			if bucket > maxBS {
				t.Errorf("a graph replay used bucket %d above cuda-graph-max-bs %d", bucket, maxBS)
			}
		}
		if b.peakGraphBS > maxBS {
			t.Errorf("a graph replay ran batch %d above cuda-graph-max-bs %d", b.peakGraphBS, maxBS)
		}
	}

	// Lock-step needs no pacing: slow steps only keep the sessions closer.
	_, lock, p := toolTimeRun(t, 1, sessions, rounds, maxBS, step, repro.ToolTime{})
	graphBS(lock)
	if lock.peakBS <= maxBS || lock.eagerTokens <= lock.graphTokens {
		t.Errorf("tool time 0: peak batch %d, %d tokens eager vs %d graph; want lock-step batches above max-bs %d running most tokens eagerly",
			lock.peakBS, lock.eagerTokens, lock.graphTokens, maxBS)
	}
	lockSteps := p.Steps

	corrupted := 0
	for seed := uint64(1); seed <= 3 && corrupted == 0; seed++ {
		res, spread, p := toolTimeRun(t, seed, sessions, rounds, maxBS, step, tool)
		paced(p)
		graphBS(spread)
		if spread.graphTokens < 2*spread.eagerTokens {
			t.Fatalf("tool time %v: %d tokens graph vs %d eager; want sessions spread out so that most run as graph replays", tool, spread.graphTokens, spread.eagerTokens)
		}
		if seed == 1 && p.Steps <= lockSteps {
			t.Errorf("tool time %v took %d steps, lock-step %d: the sessions did not spread out", tool, p.Steps, lockSteps)
		}
		corrupted = res.CorruptedSessions
	}
	if corrupted == 0 {
		t.Errorf("tool time %v: no corruption in three %dx%d runs although the sessions ran as graph replays", tool, sessions, rounds)
	}
}
