package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/demo"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/traces"
	"github.com/kvcanary/kvcanary/tui"
)

// WatchOptions are the inputs of `kvcanary watch`.
type WatchOptions struct {
	IO      *cmdutil.IOStreams
	Factory *cmdutil.Factory

	Listen      string
	AllowRemote bool
	Run         string
	Limits      listenLimits
	Bundle      string
	Speed       string
	Sim         bool
	Engine      *engineFlags
	Sessions    int
	Rounds      int
	Seed        uint64
	Record      string
	SnapshotDir string

	speedSet bool // --speed given (--sim runs unpaced without it)

	// runTUI shows the dashboard (tests replace it); default tui.Run.
	runTUI func(context.Context, tui.Options) (tui.Stats, error)
}

// NewCmdWatch builds `kvcanary watch`.
func NewCmdWatch(f *cmdutil.Factory, runF func(*WatchOptions) error) *cobra.Command {
	opts := &WatchOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "watch (--listen ADDR | --bundle FILE [--speed 10x] | --sim [engine flags]) [--record FILE]",
		Short: "Live dashboard of a collector, a bundle replay or the twin",
		Long: `Show a live dashboard of one event source, judged by every analyzer as it
arrives: session outcomes and the corruption rate with its 95% interval, room
checksums (transfer), replay canaries (buffer), graph-vs-eager samples
(compute), the scheduler, GPU telemetry, CUDA calls and the findings log.

Sources (exactly one):
  --listen ADDR     run a collector (unix:///path.sock, tcp://127.0.0.1:PORT)
  --bundle FILE     replay a trace bundle, paced by --speed (10x, 0.5x, max)
  --sim             run the twin live with the engine flags below (as fast
                    as it goes, or held to --speed to watch it unfold)

--record FILE keeps every event of a live source (--listen, --sim) in a trace
bundle; the view itself may drop events under load and says how many.

Keys: tab/shift-tab panels, enter evidence of a finding, / filter, p pause the
view (ingest continues), s snapshot recent events to a bundle, ? help, q quit.
Needs a terminal of at least 80×24; NO_COLOR turns colours off.`,
		Example: `  kvcanary watch --sim --sessions 80 --rounds 4
  kvcanary watch --sim --inject transfer-race --record run.kvtrace
  kvcanary watch --sim --speed 2x
  kvcanary watch --bundle run.kvtrace --speed 10x
  kvcanary watch --listen unix:///tmp/kvcanary.sock --record live.kvtrace`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 0
			for _, on := range []bool{opts.Listen != "", opts.Bundle != "", opts.Sim} {
				if on {
					n++
				}
			}
			if n != 1 {
				return cmdutil.UsageError("watch: give exactly one source: --listen, --bundle or --sim")
			}
			opts.speedSet = cmd.Flags().Changed("speed")
			if err := watchFlagsFitSource(cmd, opts); err != nil {
				return err
			}
			if err := opts.Limits.check(); err != nil {
				return err
			}
			if opts.Bundle != "" && opts.Record != "" {
				return cmdutil.UsageError("watch: --record works with live sources (--listen, --sim); a bundle is already recorded")
			}
			if _, err := tui.ParseSpeed(opts.Speed); err != nil {
				return cmdutil.UsageError("watch: --%w", err)
			}
			if opts.Sim && (opts.Sessions < 1 || opts.Rounds < 1) {
				return cmdutil.UsageError("watch: --sessions and --rounds must be at least 1")
			}
			if runF != nil {
				return runF(opts)
			}
			return watchRun(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Listen, "listen", "", "run a collector on unix:///path.sock or tcp://127.0.0.1:PORT")
	fl.BoolVar(&opts.AllowRemote, "allow-remote", false, "with --listen: allow a TCP address reachable from other hosts (no authentication!)")
	fl.StringVar(&opts.Run, "run", "", "with --listen: run id for events that carry none (default watch-<UTC time>)")
	addListenLimitFlags(cmd, &opts.Limits, "with --listen: ")
	fl.StringVar(&opts.Bundle, "bundle", "", "replay this trace bundle")
	fl.StringVar(&opts.Speed, "speed", "1x", "event time per wall time (10x, 0.5x) or max: --bundle replays at it, --sim is held to it (default for --sim: max)")
	fl.BoolVar(&opts.Sim, "sim", false, "run the twin live (engine flags below)")
	opts.Engine = addEngineFlags(cmd)
	fl.IntVar(&opts.Sessions, "sessions", 80, "with --sim: sessions to run, all in flight at once on the twin")
	fl.IntVar(&opts.Rounds, "rounds", 4, "with --sim: most rounds per session")
	fl.Uint64Var(&opts.Seed, "seed", 1, "with --sim: seed of the workload")
	fl.StringVar(&opts.Record, "record", "", "record every event of a live source to this trace bundle")
	fl.StringVar(&opts.SnapshotDir, "snapshot-dir", ".", "directory for the bundles the s key writes")
	return cmd
}

// watchFlagsFitSource refuses flags of another source than the one given
// (--inject with --bundle would otherwise be silently ignored).
func watchFlagsFitSource(cmd *cobra.Command, opts *WatchOptions) error {
	var bad []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch f.Name {
		case "listen", "bundle", "sim", "record", "snapshot-dir":
		case "allow-remote", "run", "buffer-budget-mib", "max-conns", "idle-timeout", "stall-timeout":
			if opts.Listen == "" {
				bad = append(bad, "--"+f.Name+" needs --listen")
			}
		case "speed":
			if opts.Bundle == "" && !opts.Sim {
				bad = append(bad, "--speed needs --bundle or --sim")
			}
		default: // the twin's workload and engine flags
			if !opts.Sim {
				bad = append(bad, "--"+f.Name+" needs --sim")
			}
		}
	})
	if len(bad) > 0 {
		return cmdutil.UsageError("watch: %s", strings.Join(bad, "; "))
	}
	return nil
}

func watchRun(opts *WatchOptions) error {
	if !opts.IO.IsStdoutTTY() {
		return cmdutil.UsageError("watch: stdout is not a terminal; for plain output use kvcanary collect (--listen), trace inspect (--bundle) or sim run (--sim)")
	}
	ctx := opts.Factory.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	now := opts.Factory.Now
	if now == nil {
		now = time.Now
	}
	speed, _ := tui.ParseSpeed(opts.Speed)
	man := traces.Manifest{Tool: "kvcanary " + buildinfo.String(), Host: localHost(), Command: "watch"}
	warmup := checksum.DefaultWarmupMaxSeqLen
	var (
		source  string
		simCfg  sim.Config
		cursor  *tui.Cursor
		replayM traces.Manifest
	)
	switch {
	case opts.Listen != "":
		if opts.Run == "" {
			opts.Run = "watch-" + now().UTC().Format("20060102T150405Z")
		}
		source, man.Run = "listen "+opts.Listen, opts.Run
	case opts.Bundle != "":
		r, err := traces.Open(opts.Bundle)
		if err != nil {
			return cmdutil.InputError(err)
		}
		replayM = r.Manifest()
		r.Close()
		if replayM.Config.Engine == "sim" {
			warmup = 4 // the twin's warmup rooms, as sim run judges them
		}
		source, man = "bundle "+cmdutil.Quote(opts.Bundle), replayM
		cursor = &tui.Cursor{}
	default:
		cfg, err := opts.Engine.config(opts.Seed)
		if err != nil {
			return err
		}
		simCfg, warmup = cfg, 4
		rc := cfg.RunConfig()
		rc.Sessions, rc.Rounds = opts.Sessions, opts.Rounds
		source = fmt.Sprintf("sim (twin) seed %d", opts.Seed)
		if !opts.speedSet {
			speed = 0
		} else if speed > 0 {
			source += fmt.Sprintf(" at ×%g", speed)
		}
		man.Config, man.Run, man.Host = rc, fmt.Sprintf("sim-seed%d", opts.Seed), hook.HostInfo{OS: "sim", Arch: "twin"}
	}

	var rejected atomic.Uint64
	var collector *hook.Collector
	if opts.Listen != "" {
		lo := hook.ListenOptions{AllowRemote: opts.AllowRemote, Run: opts.Run,
			OnReject: func(uint64, error) { rejected.Add(1) }}
		opts.Limits.apply(&lo)
		c, err := hook.Listen(opts.Listen, lo)
		if err != nil {
			if errors.Is(err, hook.ErrRemoteRefused) {
				return cmdutil.UsageError("%w", err)
			}
			return cmdutil.InputError(err)
		}
		collector = c
		source = "listen " + c.Addr()
	}

	bus := hook.NewBus()
	view := bus.Live("tui", tui.DefaultLiveCapacity)
	var (
		recErr chan error
		writer *traces.Writer
	)
	if opts.Record != "" {
		rm := man
		rm.Labels = map[string]string{"source": source}
		w, err := traces.Create(opts.Record, rm)
		if err != nil {
			if collector != nil {
				collector.Close()
			}
			return cmdutil.InputError(err)
		}
		writer = w
		sub := bus.Lossless("record", 8192)
		recErr = make(chan error, 1)
		go func() { recErr <- traces.Record(sub, w) }()
	}
	as := analyzers.All(analyzers.Options{WarmupMaxSeqLen: warmup})
	pub := hook.WithAnalyzers(bus, as...)

	var status func() string
	var simDone, simTotal atomic.Int64
	switch {
	case collector != nil:
		status = func() string {
			st := collector.Stats()
			return fmt.Sprintf("%d connections open (%d in all), %d rejected", st.Open, st.Connections, st.Rejected)
		}
	case opts.Sim:
		status = func() string { return fmt.Sprintf("%d/%d sessions finished", simDone.Load(), simTotal.Load()) }
	}
	// The source runs until its end or until the dashboard quits (cancel);
	// its end closes the bus, which the view sees as "source finished".
	toView := make(chan error, 1)
	finished := make(chan error, 1)
	go func() {
		var err error
		func() {
			defer tui.Recover(&err)
			switch {
			case collector != nil:
				err = collector.Serve(ctx, pub)
			case opts.Bundle != "":
				rejudge := map[string]bool{}
				for _, a := range as {
					rejudge[a.Name()] = true
				}
				err = tui.ReplayBundle(ctx, opts.Bundle, pub, tui.ReplayOptions{Speed: speed, Rejudge: rejudge, Cursor: cursor})
			default:
				w := sim.DefaultWorkload()
				w.Sessions, w.Rounds = opts.Sessions, opts.Rounds
				w.Tool = "kvcanary " + buildinfo.String()
				w.Judge = repro.Classifier{}.Outcome // the twin observes; repro judges
				simTotal.Store(int64(w.Sessions))
				w.Progress = func(done, total int) { simDone.Store(int64(done)); simTotal.Store(int64(total)) }
				_, err = sim.Run(ctx, simCfg, w, tui.Paced(ctx, pub, speed))
				if ctx.Err() != nil {
					err = nil // quit before the run finished
				}
			}
		}()
		if collector != nil && writer != nil {
			// Before the bus closes (and Record closes the writer): the
			// footer says what this recording refused at ingest, as collect's.
			writer.AddRejected(collector.Stats().Rejected)
		}
		bus.Close()
		toView <- err
		finished <- err
	}()

	run := opts.runTUI
	if run == nil {
		run = tui.Run
	}
	stats, uiErr := run(ctx, tui.Options{
		Title: "kvcanary watch", Source: source, Run: man.Run, Sub: view, Summaries: tui.AnalyzerSummaries(as...),
		Cursor: cursor, Done: toView, SourceStatus: status, SnapshotDir: opts.SnapshotDir, Manifest: man,
		// Many producers share a collector, and each may open its own run:
		// panels keep counting across them.
		KeepRuns: collector != nil,
		In:       opts.IO.In,
		Out:      opts.IO.Out,
		NoColor:  os.Getenv("NO_COLOR") != "",
	})
	cancel()
	srcErr := <-finished
	var recordErr error
	if recErr != nil {
		recordErr = <-recErr
	}
	writeWatchReport(opts.IO.ErrOut, stats, writer, opts.Record, rejected.Load())
	switch {
	case uiErr != nil && !errors.Is(uiErr, srcErr):
		return cmdutil.InputError(uiErr)
	case srcErr != nil:
		return cmdutil.InputError(srcErr)
	case recordErr != nil:
		return cmdutil.InputError(recordErr)
	}
	return nil
}

// writeWatchReport prints what was shown and lost, after the terminal is back.
func writeWatchReport(w io.Writer, s tui.Stats, rec *traces.Writer, recPath string, rejected uint64) {
	fmt.Fprintf(w, "watch: %d events shown, %d dropped by the view, %d reported dropped by producers, %d findings\n",
		s.Events, s.Dropped, s.ProducerDropped, s.Findings)
	if rejected > 0 {
		fmt.Fprintf(w, "watch: %d frames or lines rejected by the collector\n", rejected)
	}
	if rec != nil {
		fmt.Fprintf(w, "watch: recorded %d events to %s\n", rec.Count(), cmdutil.Quote(recPath))
	}
	if s.LastSnapshot != "" {
		fmt.Fprintf(w, "watch: last snapshot %s\n", cmdutil.Quote(s.LastSnapshot))
	}
	if s.SnapshotErr != nil {
		fmt.Fprintf(w, "watch: snapshot failed: %s\n", cmdutil.Quote(s.SnapshotErr.Error()))
	}
}

// demoTUIRun runs `kvcanary demo` with the dashboard (stdout is a terminal):
// each step appears in the investigation panel as it starts and finishes,
// and the baseline run's events fill the panels as it runs, judged by the
// analyzers whose summaries the panels show: the evidence the layer tests
// read (the A/B arms speak through their step lines). When the dashboard
// closes, the plain report follows on stdout so it stays in the scrollback.
// Quitting before the verdict stops the demo; that is no error.
func demoTUIRun(opts *DemoOptions, runTUI func(context.Context, tui.Options) (tui.Stats, error)) error {
	if runTUI == nil {
		runTUI = tui.Run
	}
	ctx := opts.Factory.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The baseline's events reach the view through a Live subscription,
	// which drops rather than slow the twin down.
	bus := hook.NewBus()
	view := bus.Live("tui", tui.DefaultLiveCapacity)
	steps := make(chan tui.Step, 256)
	as := analyzers.All(analyzers.Options{WarmupMaxSeqLen: sim.WarmupSeqLen})

	var (
		rep     *demo.Report
		runErr  error
		stopped bool
	)
	done := make(chan error, 1)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		defer bus.Close()
		lastProgress := time.Time{}
		func() {
			defer tui.Recover(&runErr)
			rep, runErr = demo.Run(ctx, demo.Options{Sessions: opts.Sessions, Rounds: opts.Rounds, Seed: opts.Seed, Out: opts.Out,
				Parallel: opts.Parallel, Tool: "kvcanary " + buildinfo.String(), Analyzers: as, Events: bus,
				Publish: func(u demo.Update) {
					switch u.State {
					case "running":
						s := tui.Step{Index: u.Index, Title: u.Step, Status: tui.StepRunning}
						if u.Total > 0 {
							if time.Since(lastProgress) < 200*time.Millisecond && u.Finished > 0 && u.Finished < u.Total {
								return
							}
							lastProgress = time.Now()
							s.Result = fmt.Sprintf("%d/%d sessions", u.Finished, u.Total)
						}
						select { // progress may be dropped; never block the demo
						case steps <- s:
						default:
						}
					case "done":
						if u.Result == nil {
							return
						}
						st := tui.StepFinding
						if u.Result.Pass {
							st = tui.StepOK
						}
						steps <- tui.Step{Index: u.Index, Title: u.Result.Title, Status: st, Result: u.Result.Result}
					}
				}})
		}()
		close(steps)
		if ctx.Err() != nil {
			runErr, stopped = nil, true // quit before the verdict
		}
		done <- runErr
	}()

	_, uiErr := runTUI(ctx, tui.Options{
		Title: "kvcanary demo", Source: fmt.Sprintf("the twin, %d sessions × %d rounds, seed %d", opts.Sessions, opts.Rounds, opts.Seed),
		Sub: view, Summaries: tui.AnalyzerSummaries(as...), Steps: steps, Done: done, SnapshotDir: opts.Out,
		In: opts.IO.In, Out: opts.IO.Out, NoColor: os.Getenv("NO_COLOR") != "",
	})
	cancel()
	<-ran
	out := opts.IO.Out
	if rep != nil {
		for i := range rep.Steps {
			writeDemoStep(out, i+1, &rep.Steps[i])
		}
		if rep.Out != "" {
			fmt.Fprintf(out, "\nbundles: %s\n", rep.Out)
		}
	}
	if stopped {
		fmt.Fprintln(opts.IO.ErrOut, "demo: stopped before the verdict")
	}
	if uiErr != nil && !errors.Is(uiErr, runErr) {
		return cmdutil.InputError(uiErr)
	}
	return runErr
}
