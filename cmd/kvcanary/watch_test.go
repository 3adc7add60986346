package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
	"github.com/kvcanary/kvcanary/tui"
)

func TestWatchFlags(t *testing.T) {
	got := mustParse(t, NewCmdWatch, "--sim", "--inject", "transfer-race", "--sessions", "8", "--rounds", "2", "--seed", "3", "--record", "r.kvtrace", "--multi-stream-overlap=false")
	if !got.Sim || got.Sessions != 8 || got.Rounds != 2 || got.Seed != 3 || got.Record != "r.kvtrace" || !got.speedSet || got.Speed != "1x" {
		// --sim without --speed is paced at 1x, the twin's step time.
		t.Fatalf("options %+v", got)
	}
	cfg, err := got.Engine.config(got.Seed)
	if err != nil || cfg.MultiStreamOverlap || len(cfg.Inject) != 1 || cfg.Inject[0] != "transfer-race" {
		t.Fatalf("engine config %+v, %v", cfg, err)
	}
	if got, err = parseCmd(NewCmdWatch, "--sim", "--speed", "2x"); err != nil || !got.speedSet || got.Speed != "2x" {
		t.Fatalf("sim speed: %v %+v", err, got)
	}
	if got, err = parseCmd(NewCmdWatch, "--bundle", "x.kvtrace", "--speed", "10x"); err != nil || got.Bundle != "x.kvtrace" || got.Speed != "10x" {
		t.Fatalf("bundle flags: %v %+v", err, got)
	}
	for _, args := range [][]string{
		{},
		{"--sim", "--bundle", "x.kvtrace"},
		{"--bundle", "x.kvtrace", "--record", "y.kvtrace"},
		{"--bundle", "x.kvtrace", "--speed", "fast"},
		{"--bundle", "x.kvtrace", "--speed", "-2x"},
		{"--sim", "--sessions", "0"},
		{"--listen", "unix:///tmp/x.sock", "extra"},
		{"--bundle", "x.kvtrace", "--inject", "transfer-race"},
		{"--bundle", "x.kvtrace", "--sessions", "3"},
		{"--listen", "unix:///tmp/x.sock", "--speed", "10x"},
		{"--sim", "--allow-remote"},
	} {
		wantUsage(t, NewCmdWatch, args...)
	}
}

// noDashboard is a runTUI for runs that must stop before the dashboard: if
// it starts, t fails with msg.
func noDashboard(t *testing.T, msg string) func(context.Context, tui.Options) (tui.Stats, error) {
	return func(context.Context, tui.Options) (tui.Stats, error) {
		t.Fatal(msg)
		return tui.Stats{}, nil
	}
}

func TestWatchNeedsTerminal(t *testing.T) {
	ios, _, _, _ := cmdutil.Test()
	opts := &WatchOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Ctx: context.Background()}, Sim: true, Speed: "1x",
		runTUI: noDashboard(t, "dashboard started without a terminal")}
	err := watchRun(opts)
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "not a terminal") {
		t.Fatalf("err %v", err)
	}
}

// drainUI is a dashboard stand-in: it reads the subscription to its end (or
// until stop says so) and reports what it saw.
func drainUI(t *testing.T, seen *[]hook.Event, stop func([]hook.Event) bool) func(context.Context, tui.Options) (tui.Stats, error) {
	return func(ctx context.Context, o tui.Options) (tui.Stats, error) {
		t.Helper()
		if o.Sub == nil || o.Summaries == nil || o.Done == nil {
			t.Errorf("options lack Sub, Summaries or Done: %+v", o)
		}
		for {
			select {
			case <-o.Sub.Ready():
			case <-time.After(60 * time.Second): // a hang guard; building the twin under -race is slow
				t.Error("no events for 60s")
				return tui.Stats{}, nil
			}
			var open bool
			*seen, open = o.Sub.Drain(*seen)
			if !open || (stop != nil && stop(*seen)) {
				return tui.Stats{Events: uint64(len(*seen)), Dropped: o.Sub.Dropped()}, nil
			}
		}
	}
}

func countKind(evs []hook.Event, k hook.Kind) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

// TestWatchSimRecordThenReplay runs the twin live with --record, then
// replays the recording: the replay shows the same events, and the findings
// the analyzers recorded are judged again rather than shown twice.
func TestWatchSimRecordThenReplay(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "sim.kvtrace")
	c := newTestCLI()
	c.IO.SetTTY(true, true)
	var seen []hook.Event
	cmd := NewCmdWatch(c.F, func(o *WatchOptions) error {
		o.runTUI = drainUI(t, &seen, nil)
		return watchRun(o)
	})
	if err := c.exec(cmd, "--sim", "--sessions", "3", "--rounds", "1", "--inject", "transfer-race", "--no-graphdiff", "--pool-tokens", "20000", "--record", rec, "--speed", "max"); err != nil {
		t.Fatalf("watch --sim: %v; stderr %s", err, c.ErrOut)
	}
	if countKind(seen, hook.KindRunStart) != 1 || countKind(seen, hook.KindSession) != 3 {
		t.Fatalf("view saw %d run.start and %d sessions, want 1 and 3", countKind(seen, hook.KindRunStart), countKind(seen, hook.KindSession))
	}
	sum, err := traces.Inspect(rec)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Events != uint64(len(seen)) || sum.Truncated || sum.Manifest.Command != "watch" {
		t.Fatalf("recorded %d events (truncated %v, command %q), the view saw %d", sum.Events, sum.Truncated, sum.Manifest.Command, len(seen))
	}
	if !strings.Contains(c.ErrOut.String(), "recorded ") || !strings.Contains(c.ErrOut.String(), "0 dropped by the view") {
		t.Fatalf("exit report: %q", c.ErrOut)
	}
	recorded := sum.Counts["finding"]
	if recorded == 0 {
		t.Fatal("the twin with transfer-race recorded no findings; the replay check needs some")
	}

	c = newTestCLI()
	c.IO.SetTTY(true, true)
	seen = nil
	var opts tui.Options
	cmd = NewCmdWatch(c.F, func(o *WatchOptions) error {
		ui := drainUI(t, &seen, nil)
		o.runTUI = func(ctx context.Context, to tui.Options) (tui.Stats, error) { opts = to; return ui(ctx, to) }
		return watchRun(o)
	})
	if err := c.exec(cmd, "--bundle", rec, "--speed", "max"); err != nil {
		t.Fatalf("watch --bundle: %v; %s", err, c.ErrOut)
	}
	if got := countKind(seen, hook.KindFinding); uint64(got) != recorded {
		t.Fatalf("replay shows %d findings, the bundle recorded %d", got, recorded)
	}
	if uint64(len(seen)) != sum.Events {
		t.Fatalf("replay shows %d events, the bundle has %d", len(seen), sum.Events)
	}
	if st := opts.Cursor.State(); !st.Done || st.AtTS != sum.LastTS || st.FirstTS != sum.FirstTS {
		t.Fatalf("cursor %+v, bundle span %d..%d", st, sum.FirstTS, sum.LastTS)
	}
	if opts.Run != "sim-seed1" || !strings.HasPrefix(opts.Source, "bundle ") {
		t.Fatalf("source %q run %q", opts.Source, opts.Run)
	}
	if sums := opts.Summaries(); sums.Checksum == nil || sums.Canary == nil || sums.Graphdiff == nil {
		t.Fatalf("summaries %+v", sums)
	}
}

func TestWatchBundleErrors(t *testing.T) {
	ios, _, _, _ := cmdutil.Test()
	ios.SetTTY(true, true)
	opts := &WatchOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Ctx: context.Background()}, Bundle: filepath.Join(t.TempDir(), "none.kvtrace"), Speed: "1x",
		runTUI: noDashboard(t, "dashboard started on a missing bundle")}
	err := watchRun(opts)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), "none.kvtrace") {
		t.Fatalf("err %v", err)
	}
}

func TestWatchListen(t *testing.T) {
	dir := t.TempDir()
	addr := "unix://" + filepath.Join(dir, "w.sock")
	rec := filepath.Join(dir, "live.kvtrace")
	c := newTestCLI()
	c.IO.SetTTY(true, true)
	var seen []hook.Event
	cmd := NewCmdWatch(c.F, func(o *WatchOptions) error {
		ui := drainUI(t, &seen, func(evs []hook.Event) bool { return countKind(evs, hook.KindSession) == 3 })
		o.runTUI = func(ctx context.Context, to tui.Options) (tui.Stats, error) {
			if !strings.HasPrefix(to.Source, "listen unix://") || to.SourceStatus == nil || !to.KeepRuns {
				t.Errorf("source %q, status func set %v", to.Source, to.SourceStatus != nil)
			}
			em, err := hook.Dial(addr, hook.DialOptions{FlushTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				em.Emit(hook.Event{Kind: hook.KindSession, TS: int64(i + 1), Body: &hook.Session{ID: "s", Outcome: hook.OutcomeLeak}})
			}
			defer em.Close()
			return ui(ctx, to)
		}
		return watchRun(o)
	})
	if err := c.exec(cmd, "--listen", addr, "--record", rec, "--run", "live1"); err != nil {
		t.Fatalf("watch --listen: %v; %s", err, c.ErrOut)
	}
	if countKind(seen, hook.KindSession) != 3 || seen[0].Run != "live1" {
		t.Fatalf("view saw %+v", seen)
	}
	if !strings.Contains(c.ErrOut.String(), "3 events shown, 0 dropped by the view") {
		t.Fatalf("exit report %q", c.ErrOut)
	}
	sum, err := traces.Inspect(rec)
	if err != nil || sum.Counts["session"] != 3 || sum.Manifest.Run != "live1" {
		t.Fatalf("recorded %+v, %v", sum.Counts, err)
	}
}

// TestDemoWithDashboard runs a small demo through the dashboard's options:
// every step arrives (running, then its result), the baseline's events reach
// the view as it runs (one run.start: no A/B arm), the panels have
// analyzer summaries, and the plain report follows on stdout.
func TestDemoWithDashboard(t *testing.T) {
	ios, _, out, errOut := cmdutil.Test()
	ios.SetTTY(true, true)
	opts := &DemoOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Ctx: context.Background(), Now: time.Now},
		JSON: &cmdutil.JSONFlags{}, Sessions: 3, Rounds: 1, Seed: 1, Out: t.TempDir()}
	var (
		seen    []hook.Event
		results = map[int]tui.Step{}
		sums    analyzers.Summaries
	)
	err := demoTUIRun(opts, func(ctx context.Context, o tui.Options) (tui.Stats, error) {
		if o.Steps == nil || o.Sub == nil || o.Done == nil || !strings.Contains(o.Title, "demo") {
			t.Fatalf("options %+v", o)
		}
		steps, ready := o.Steps, o.Sub.Ready()
		for steps != nil || ready != nil {
			select {
			case s, ok := <-steps:
				if !ok {
					steps = nil
					continue
				}
				if s.Status != tui.StepRunning {
					results[s.Index] = s
				}
			case <-ready:
				var open bool
				seen, open = o.Sub.Drain(seen)
				sums = o.Summaries()
				if !open {
					ready = nil
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("demo stalled")
			}
		}
		if err := <-o.Done; err != nil {
			t.Errorf("demo: %v", err)
		}
		return tui.Stats{}, nil
	})
	if err != nil {
		t.Fatalf("demo: %v; %s", err, errOut)
	}
	if len(results) < 9 {
		t.Fatalf("%d step results, want 9: %+v", len(results), results)
	}
	if v := results[len(results)]; !strings.Contains(strings.ToLower(v.Title), "verdict") && v.Result == "" {
		t.Fatalf("last step %+v is not the verdict", v)
	}
	if n := countKind(seen, hook.KindRunStart); n != 1 {
		t.Fatalf("the view replayed %d runs, want 1 (the baseline the layer tests read)", n)
	}
	if sums.Checksum == nil || sums.Canary == nil || sums.Graphdiff == nil {
		t.Fatalf("summaries %+v", sums)
	}
	if !strings.Contains(out.String(), "VERDICT: ") || !strings.Contains(out.String(), "bundles: ") {
		t.Fatalf("plain report after the dashboard: %q", out)
	}
}

func TestWatchListenRefusesRemoteBeforeRecording(t *testing.T) {
	ios, _, _, _ := cmdutil.Test()
	ios.SetTTY(true, true)
	rec := filepath.Join(t.TempDir(), "never.kvtrace")
	opts := &WatchOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Ctx: context.Background()}, Listen: "tcp://0.0.0.0:0", Record: rec, Speed: "1x",
		runTUI: noDashboard(t, "dashboard started")}
	err := watchRun(opts)
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "non-loopback") {
		t.Fatalf("err %v", err)
	}
	if _, statErr := os.Stat(rec); statErr == nil {
		t.Fatal("a refused listen still created the recording")
	}
}

// TestDemoPicksDashboardOnTerminal: on a terminal demo runs the dashboard;
// with --plain, --json or without a terminal it never does. The dashboard
// stand-in quits at once, which stops the demo before its verdict (no error).
func TestDemoPicksDashboardOnTerminal(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		tty  bool
		args []string
		want bool
	}{
		{"terminal", true, nil, true},
		{"plain", true, []string{"--plain"}, false},
		{"json", true, []string{"--json"}, false},
		{"pipe", false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCLI()
			c.IO.SetTTY(tc.tty, tc.tty)
			if !tc.want {
				c.F.Ctx = cancelled // the plain demo stops at once; only the choice matters
			}
			errOut := c.ErrOut
			called := false
			cmd := NewCmdDemo(c.F, func(o *DemoOptions) error {
				o.runTUI = func(context.Context, tui.Options) (tui.Stats, error) { called = true; return tui.Stats{}, nil }
				return demoRun(o)
			})
			err := c.exec(cmd, append([]string{"--sessions", "2", "--rounds", "1", "--out", t.TempDir()}, tc.args...)...)
			if called != tc.want {
				t.Fatalf("dashboard used: %v, want %v (err %v)", called, tc.want, err)
			}
			if tc.want && (err != nil || !strings.Contains(errOut.String(), "stopped before the verdict")) {
				t.Fatalf("quitting the dashboard: err %v, stderr %q", err, errOut)
			}
		})
	}
}
