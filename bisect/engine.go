package bisect

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	var rec *traces.Recording
	bundle := seg.WaveBundle(w)
	if bundle != "" {
		rec, err = traces.StartRecording(bundle, traces.Manifest{Tool: e.Tool, Host: host, Config: rc,
			Run: fmt.Sprintf("bisect-%s-%d-w%d", seg.Arm, seg.Index, w), Command: "bisect"})
		if err != nil {
			return false, fmt.Errorf("create bundle: %w", err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := false
	pub := hook.PublishFunc(func(ev hook.Event) {
		if rec != nil {
			rec.Publish(ev)
		}
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
	_, runErr := sim.Run(runCtx, cfg, wl, pub)
	if stopped && ctx.Err() == nil {
		runErr = nil // we stopped it
	}
	if rec != nil {
		if err := rec.Close(); err != nil && runErr == nil {
			runErr = fmt.Errorf("record %s: %w", bundle, err)
		}
	}
	return stopped, runErr
}
