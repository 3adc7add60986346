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
	"github.com/kvcanary/kvcanary/pipeline"
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
	AllowRemote bool // --insecure-remote (alias --allow-remote)
	TLS         listenTLS
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
	Export      exportOptions

	speedSet bool // --speed given, or --sim (paced at 1x unless --speed max)

	// runTUI shows the dashboard (tests replace it); default tui.Run.
	runTUI func(context.Context, tui.Options) (tui.Stats, error)
}

// watchLong is the long help of `kvcanary watch`.
const watchLong = `Show a live dashboard of one event source, judged by every analyzer as it
arrives: session outcomes and the corruption rate with its 95% interval, room
checksums (transfer), replay canaries (buffer), graph-vs-eager samples
(compute), the scheduler, GPU telemetry, CUDA calls and the findings log.

Sources (exactly one):
  --listen ADDR     run a collector (unix:///path.sock, tcp://127.0.0.1:PORT)
  --bundle FILE     replay a trace bundle, paced by --speed (10x, 0.5x, max)
  --sim             run the twin live with the engine flags below, paced at
                    its step time (--speed 1x; --speed max rushes)

--record FILE keeps every event of a live source (--listen, --sim) in a trace
bundle; the view itself may drop events under load and says how many.

Keys: tab/shift-tab panels, enter evidence of a finding, / filter, p pause the
view (ingest continues), s snapshot recent events to a bundle, ? help, q quit.
Needs a terminal of at least 80×24; NO_COLOR turns colours off.`

// NewCmdWatch builds `kvcanary watch`.
func NewCmdWatch(f *cmdutil.Factory, runF func(*WatchOptions) error) *cobra.Command {
	opts := &WatchOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "watch (--listen ADDR | --bundle FILE [--speed 10x] | --sim [engine flags]) [--record FILE]",
		Short: "Live dashboard of a collector, a bundle replay or the twin",
		Long:  watchLong,
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
			// --sim is paced at the flag's default, 1x: one twin step per
			// step time of wall time (--speed max rushes).
			opts.speedSet = cmd.Flags().Changed("speed") || opts.Sim
			if err := watchFlagsFitSource(cmd, opts); err != nil {
				return err
			}
			if err := opts.Limits.check(); err != nil {
				return err
			}
			if opts.Bundle != "" && opts.Record != "" {
				return cmdutil.UsageError("watch: --record works with live sources (--listen, --sim); a bundle is already recorded")
			}
			if _, err := pipeline.ParseSpeed(opts.Speed); err != nil {
				return cmdutil.UsageError("watch: --%w", err)
			}
			if opts.Sim && (opts.Sessions < 1 || opts.Rounds < 1) {
				return cmdutil.UsageError("watch: --sessions and --rounds must be at least 1")
			}
			return runOr(opts, runF, watchRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Listen, "listen", "", "run a collector on unix:///path.sock or tcp://127.0.0.1:PORT")
	addListenSecurityFlags(cmd, &opts.TLS, &opts.AllowRemote, "with --listen: ")
	fl.StringVar(&opts.Run, "run", "", "with --listen: run id for events that carry none (default watch-<UTC time>)")
	addListenLimitFlags(cmd, &opts.Limits, "with --listen: ")
	fl.StringVar(&opts.Bundle, "bundle", "", "replay this trace bundle")
	fl.StringVar(&opts.Speed, "speed", "1x", "event time per wall time (10x, 0.5x) or max: --bundle replays at it; --sim is held to it, so 1x steps the twin at its step time (25ms) and max rushes")
	fl.BoolVar(&opts.Sim, "sim", false, "run the twin live (engine flags below)")
	opts.Engine = addEngineFlags(cmd)
	fl.IntVar(&opts.Sessions, "sessions", 80, "with --sim: sessions to run, all in flight at once on the twin")
	fl.IntVar(&opts.Rounds, "rounds", 4, "with --sim: most rounds per session")
	fl.Uint64Var(&opts.Seed, "seed", 1, "with --sim: seed of the workload")
	fl.StringVar(&opts.Record, "record", "", "record every event of a live source to this trace bundle")
	fl.StringVar(&opts.SnapshotDir, "snapshot-dir", "", "directory for the bundles the s key writes (default $XDG_STATE_HOME/kvcanary/snapshots or ~/.local/state/kvcanary/snapshots)")
	addExportFlags(cmd, &opts.Export)
	return cmd
}

// watchFlagsFitSource refuses flags of another source than the one given
// (--inject with --bundle would otherwise be silently ignored).
func watchFlagsFitSource(cmd *cobra.Command, opts *WatchOptions) error {
	var bad []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch f.Name {
		case "listen", "bundle", "sim", "record", "snapshot-dir", "metrics-addr", "metrics-remote", "otlp-endpoint":
		case "allow-remote", "insecure-remote", "tls-cert", "tls-key", "client-ca", "run", "buffer-budget-mib", "max-conns", "idle-timeout", "stall-timeout":
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
	ws, err := chooseWatchSource(opts)
	if err != nil {
		return err
	}
	as := analyzers.All(analyzers.Options{WarmupMaxSeqLen: ws.warmup})
	if r, ok := ws.src.(pipeline.Replay); ok {
		// Re-judged: the analyzers' recorded findings are left out so each
		// finding shows once.
		r.Opts.Rejudge = map[string]bool{}
		for _, a := range as {
			r.Opts.Rejudge[a.Name()] = true
		}
		ws.src = r
	}
	var stats tui.Stats
	po := pipeline.Options{Analyzers: as, View: watchView(opts, ws, as, &stats), ViewCapacity: tui.DefaultLiveCapacity}
	if opts.Record != "" {
		po.Record, po.Manifest = opts.Record, ws.man
		po.Manifest.Labels = map[string]string{"source": ws.label}
	}
	p, stopExport, err := opts.Export.newPipeline(factoryCtx(opts.Factory), opts.IO.ErrOut, exportSource{Run: ws.man.Run, Collector: ws.collector, Analyzers: as}, po, "")
	if err != nil {
		if ws.collector != nil {
			ws.collector.Close()
		}
		return err
	}
	defer stopExport()
	// The source runs until its end or until the dashboard quits (cancel);
	// its end closes the bus, which the view sees as "source finished".
	res := p.Run(factoryCtx(opts.Factory), ws.src)
	writeWatchReport(opts.IO.ErrOut, stats, p.Writer(), opts.Record, ws.rejected.Load())
	if err := res.Err(); err != nil {
		return cmdutil.InputError(err)
	}
	return nil
}

// watchSource is the source watch shows, with what the dashboard says of it.
type watchSource struct {
	src       pipeline.Source
	label     string // the dashboard's source line
	man       traces.Manifest
	warmup    int // the checksum analyzer's warmup rooms
	cursor    *tui.Cursor
	collector *hook.Collector
	rejected  *atomic.Uint64
}

// chooseWatchSource builds the one source the flags name. A collector
// listens before anything is created, so a refused address leaves nothing
// behind.
func chooseWatchSource(opts *WatchOptions) (*watchSource, error) {
	now := opts.Factory.Now
	if now == nil {
		now = time.Now
	}
	ws := &watchSource{man: traces.Manifest{Tool: "kvcanary " + buildinfo.String(), Host: localHost(), Command: "watch"},
		warmup: checksum.DefaultWarmupMaxSeqLen, rejected: &atomic.Uint64{}}
	speed, _ := pipeline.ParseSpeed(opts.Speed)
	switch {
	case opts.Listen != "":
		if opts.Run == "" {
			opts.Run = "watch-" + now().UTC().Format("20060102T150405Z")
		}
		security := func(lo *hook.ListenOptions) error {
			return opts.TLS.apply(lo, opts.Listen, opts.AllowRemote, opts.IO.ErrOut, "watch")
		}
		c, err := listenCollector(opts.Listen, security, opts.Run, opts.Limits, false, func(uint64, error) { ws.rejected.Add(1) })
		if err != nil {
			return nil, err
		}
		ws.collector, ws.label, ws.man.Run = c, "listen "+c.Addr(), opts.Run
		ws.src = &pipeline.Collector{C: c, StatusOf: func(st hook.Stats) string {
			return fmt.Sprintf("%d connections open (%d in all), %d rejected", st.Open, st.Connections, st.Rejected)
		}}
	case opts.Bundle != "":
		r, err := traces.Open(opts.Bundle)
		if err != nil {
			return nil, cmdutil.InputError(err)
		}
		ws.man = r.Manifest()
		r.Close()
		if ws.man.Config.Engine == "sim" {
			ws.warmup = 4 // the twin's warmup rooms, as sim run judges them
		}
		ws.label, ws.cursor = "bundle "+cmdutil.Quote(opts.Bundle), &tui.Cursor{}
		ws.src = pipeline.Replay{Path: opts.Bundle, Opts: pipeline.ReplayOptions{Speed: speed, Cursor: ws.cursor}}
	default:
		return watchTwin(opts, ws, speed)
	}
	return ws, nil
}

// watchTwin is watch --sim: the twin, as fast as it goes unless --speed.
func watchTwin(opts *WatchOptions, ws *watchSource, speed float64) (*watchSource, error) {
	cfg, err := opts.Engine.config(opts.Seed)
	if err != nil {
		return nil, err
	}
	rc := cfg.RunConfig()
	rc.Sessions, rc.Rounds = opts.Sessions, opts.Rounds
	ws.label, ws.warmup = fmt.Sprintf("sim (twin) seed %d", opts.Seed), 4
	if !opts.speedSet {
		speed = 0
	} else if speed > 0 {
		ws.label += fmt.Sprintf(" at ×%g", speed)
	}
	ws.man.Config, ws.man.Run, ws.man.Host = rc, fmt.Sprintf("sim-seed%d", opts.Seed), hook.HostInfo{OS: "sim", Arch: "twin"}
	ws.src = &quitTwin{Twin: pipeline.Twin{Config: cfg, Workload: simWorkload(opts.Sessions, opts.Rounds), Speed: speed}}
	return ws, nil
}

// quitTwin is the twin whose run, cut short by quitting the dashboard, is
// no error.
type quitTwin struct{ pipeline.Twin }

func (t *quitTwin) Run(ctx context.Context, pub hook.Publisher) error {
	err := t.Twin.Run(ctx, pub)
	if ctx.Err() != nil {
		return nil // quit before the run finished
	}
	return err
}

// watchView shows the dashboard over the pipeline's live view; stats gets
// its counters for the exit report.
func watchView(opts *WatchOptions, ws *watchSource, as []hook.Analyzer, stats *tui.Stats) pipeline.View {
	run := opts.runTUI
	if run == nil {
		run = tui.Run
	}
	var status func() string
	if st, ok := ws.src.(pipeline.Statuser); ok {
		status = st.Status
	}
	return func(ctx context.Context, sub *hook.Subscription, done <-chan error) error {
		var err error
		*stats, err = run(ctx, tui.Options{
			Title: "kvcanary watch", Source: ws.label, Run: ws.man.Run, Sub: sub, Summaries: analyzers.SetOf(as...).Summaries,
			Cursor: ws.cursor, Done: done, SourceStatus: status, SnapshotDir: opts.SnapshotDir, Manifest: ws.man,
			// Many producers share a collector, and each may open its own
			// run: panels keep counting across them.
			KeepRuns: ws.collector != nil,
			In:       opts.IO.In,
			Out:      opts.IO.Out,
			NoColor:  os.Getenv("NO_COLOR") != "",
		})
		return err
	}
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
	// The baseline's events reach the view through the pipeline's live
	// view, which drops rather than slow the twin down.
	steps := make(chan tui.Step, 256)
	as := analyzers.All(analyzers.Options{WarmupMaxSeqLen: sim.WarmupSeqLen})
	var rep *demo.Report
	src := pipeline.SourceFunc(func(ctx context.Context, pub hook.Publisher) error {
		defer close(steps)
		var err error
		rep, err = demo.Run(ctx, demo.Options{Sessions: opts.Sessions, Rounds: opts.Rounds, Seed: opts.Seed, Out: opts.Out,
			Parallel: opts.Parallel, Tool: "kvcanary " + buildinfo.String(), Now: opts.Factory.Now, Analyzers: as, Events: pub, Pictures: true, BundlesRemoved: opts.Out == "" && !opts.Keep,
			Publish: demoSteps(steps, opts.Factory.Now)})
		return err
	})
	p, err := pipeline.New(pipeline.Options{ViewCapacity: tui.DefaultLiveCapacity,
		View: func(ctx context.Context, sub *hook.Subscription, done <-chan error) error {
			_, err := runTUI(ctx, tui.Options{
				Title: "kvcanary demo", Source: fmt.Sprintf("the twin, %d sessions × %d rounds, seed %d", opts.Sessions, opts.Rounds, opts.Seed),
				Sub: sub, Summaries: analyzers.SetOf(as...).Summaries, Steps: steps, Done: done, SnapshotDir: opts.Out,
				In: opts.IO.In, Out: opts.IO.Out, NoColor: os.Getenv("NO_COLOR") != "",
			})
			return err
		}})
	if err != nil {
		return cmdutil.InputError(err)
	}
	res := p.Run(factoryCtx(opts.Factory), src)
	if res.Cancelled {
		res.SourceErr = nil // quit before the verdict
	}
	out := opts.IO.Out
	if rep != nil {
		for i := range rep.Steps {
			writeDemoStep(out, i+1, &rep.Steps[i])
		}
	}
	demoBundlesDone(opts, rep, out)
	if res.Cancelled {
		fmt.Fprintln(opts.IO.ErrOut, "demo: stopped before the verdict")
	}
	if res.ViewErr != nil && !errors.Is(res.ViewErr, res.SourceErr) {
		return cmdutil.InputError(res.ViewErr)
	}
	return res.SourceErr
}

// demoSteps turns the demo's updates into the dashboard's investigation
// steps: progress at most every 200 ms and dropped rather than block the
// demo; results always.
func demoSteps(steps chan<- tui.Step, now func() time.Time) func(demo.Update) {
	if now == nil {
		now = time.Now
	}
	var lastProgress time.Time
	return func(u demo.Update) {
		switch u.State {
		case "running":
			s := tui.Step{Index: u.Index, Title: u.Step, Status: tui.StepRunning}
			if u.Total > 0 {
				if now().Sub(lastProgress) < 200*time.Millisecond && u.Finished > 0 && u.Finished < u.Total {
					return
				}
				lastProgress = now()
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
	}
}
