package bisect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
)

// Twin runs segments on the embedded twin, in process: sim.Run with the
// plan's concurrency kept in flight.
type Twin struct {
	// Config turns an arm's flags (sim run's engine flags) into the twin's
	// configuration; the CLI parses them with sim run's own flag set.
	Config      func(flags []string, seed uint64) (sim.Config, error)
	Rounds      int
	Concurrency int
	Tool        string // tool version for bundles
}

// Run implements Engine: one twin run per wave.
func (e *Twin) Run(ctx context.Context, seg Segment, stats *sessions.RunStats, observe func(int, string, string) bool) error {
	for w := range maxWaves(seg.Sessions, e.Concurrency) {
		stop, err := e.wave(ctx, seg, w, stats, observe)
		if err != nil || stop {
			return err
		}
	}
	return errWavesExhausted(seg.Sessions)
}

// maxWaves bounds a segment's waves: enough for its sessions, and one more
// (a wave's last sessions may finish after the bisect had enough).
func maxWaves(sessions, concurrency int) int { return (sessions+concurrency-1)/concurrency + 1 }

func errWavesExhausted(sessions int) error {
	return fmt.Errorf("the waves ended before %d sessions could be counted in start order (a session never finished)", sessions)
}

func (e *Twin) wave(ctx context.Context, seg Segment, w int, stats *sessions.RunStats, observe func(int, string, string) bool) (bool, error) {
	cfg, err := e.Config(seg.Flags, seg.WaveSeed(w))
	if err != nil {
		return false, fmt.Errorf("flags %s: %w", strings.Join(seg.Flags, " "), err)
	}
	wl := sim.DefaultWorkload()
	wl.Sessions, wl.Rounds, wl.Tool = e.Concurrency, e.Rounds, e.Tool
	wl.Judge = outcome.Classifier{}.Outcome
	rc := cfg.RunConfig()
	rc.Sessions, rc.Rounds, rc.Concurrency = wl.Sessions, wl.Rounds, wl.Sessions
	rc.ToolTime = wl.ToolTime()
	host := hook.HostInfo{OS: "sim", Arch: "twin"}
	if !stats.HaveManifest {
		stats.SetManifest(e.Tool, time.Now(), host, rc)
	}
	bundle := seg.WaveBundle(w)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := false
	// A sink of the wave's pipeline: the arm's statistics and the bisect's
	// look at every finished session; its stop cancels the run.
	look := hook.PublishFunc(func(ev hook.Event) {
		if ev.Kind == hook.KindRunStart || ev.Kind == hook.KindRunEnd {
			return // the arm's manifest stands for its waves
		}
		stats.Observe(ev)
		s, ok := ev.Body.(*hook.Session)
		if !ok || stopped {
			return
		}
		i, err := strconv.Atoi(strings.TrimPrefix(s.ID, "s"))
		if err != nil {
			return
		}
		if observe(w*e.Concurrency+i, fmt.Sprintf("w%d/%s", w, s.ID), s.Outcome) {
			stopped = true
			cancel()
		}
	})
	po := pipeline.Options{Sinks: []hook.Publisher{look}}
	if bundle != "" {
		po.Record, po.Manifest = bundle, traces.Manifest{Tool: e.Tool, Host: host, Config: rc,
			Run: fmt.Sprintf("bisect-%s-%d-w%d", seg.Arm, seg.Index, w), Command: "bisect"}
	}
	p, err := pipeline.New(po)
	if err != nil {
		return false, err // traces says "create bundle: …"
	}
	res := p.Run(runCtx, &pipeline.Twin{Config: cfg, Workload: wl})
	runErr := res.Err()
	if stopped && ctx.Err() == nil && res.SourceErr != nil && errors.Is(res.SourceErr, context.Canceled) {
		runErr = res.RecordErr // we stopped it
	}
	return stopped, runErr
}
