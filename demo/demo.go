package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
)

// Step names, in the order Run reports them.
const (
	StepBaseline  = "baseline"
	StepTransfer  = "transfer"
	StepBuffer    = "buffer"
	StepCompute   = "compute"
	StepVerdict   = "verdict"
	stepABPrefix  = "ab:"
	defaultRounds = 4
)

// Options configure Run.
type Options struct {
	Sessions int    // default 80
	Rounds   int    // default 4
	Seed     uint64 // default 1 (0 is a valid seed only when SeedSet)
	Out      string // bundle directory; created if missing; "" makes a temp dir
	Parallel int    // twin runs at once (default min(2, GOMAXPROCS))
	Tool     string // tool version stamped in bundles
	Toggles  []Toggle
	// Publish receives every Update, from one goroutine at a time, in step
	// order (a step's "running" before its "done").
	Publish func(Update)
	// Base mutates the baseline configuration (tests inject faults with it).
	Base func(*sim.Config)
	// Analyzers judge the baseline run (default: analyzers.All). A caller
	// that shows their summaries while the run goes passes its own; they
	// must be fresh and safe for concurrent use (kvcanary's are).
	Analyzers []hook.Analyzer
	// Now is the clock of the report's times (nil: time.Now).
	Now func() time.Time
	// Events, when set, receives every event of the baseline run as it
	// happens, the analyzers' findings included, on the run's goroutine, so
	// a dashboard fills while the run goes. It must not block for long (a
	// hook.Bus with a Live subscription drops instead).
	Events hook.Publisher
	// Pictures writes report.html and timeline.json beside the bundles
	// (pictures.go); kvcanary demo sets it.
	Pictures bool
	// BundlesRemoved says the caller deletes the bundles once Run returns
	// (a temporary directory without --keep): report.html then says they
	// were removed, and how to keep them, instead of giving re-check
	// commands on files that will be gone.
	BundlesRemoved bool
}

// Toggle is one A/B arm: a flag change against the baseline.
type Toggle struct {
	Name  string            // as a command line says it: "--multi-stream-overlap=false"
	Flag  string            // sessions.EngineFlagDiffs name: "multi_stream_overlap"
	Apply func(*sim.Config) // the change
	// Scope lists the mechanisms the change turns off or moves out of the
	// captured graph; Decide prefers the fix with the smallest scope.
	Scope []string
}

// Mechanisms toggles can turn off.
const (
	MechCUDAGraph     = "cuda-graph-capture"
	MechGraphPlanner  = "graph-memory-planner"
	MechOverlap       = "multi-stream-overlap"
	MechBF16IndexK    = "bf16-index-k"
	MechInGraphLogits = "in-graph-index-logits"
	MechEagerFallback = "eager-fallback-above-max-bs"
)

// graphMechanisms are the mechanisms of captured replay (where graph ≠ eager
// localizes a transient-compute fault).
var graphMechanisms = map[string]bool{MechCUDAGraph: true, MechGraphPlanner: true, MechOverlap: true, MechInGraphLogits: true}

// DefaultToggles are the seeds' four A/B experiments.
func DefaultToggles() []Toggle {
	return []Toggle{
		{Name: "--index-k-dtype fp8", Flag: "index_k_dtype", Apply: func(c *sim.Config) { c.IndexKDtype = "fp8" },
			Scope: []string{MechBF16IndexK, MechInGraphLogits}},
		{Name: "--disable-cuda-graph", Flag: "cuda_graph", Apply: func(c *sim.Config) { c.DisableCUDAGraph = true },
			Scope: []string{MechCUDAGraph, MechGraphPlanner, MechOverlap}},
		{Name: "--cuda-graph-max-bs 64", Flag: "cuda_graph_max_bs", Apply: func(c *sim.Config) { c.CUDAGraphMaxBS = 64 },
			Scope: []string{MechEagerFallback}},
		{Name: "--multi-stream-overlap=false", Flag: "multi_stream_overlap", Apply: func(c *sim.Config) { c.MultiStreamOverlap = false },
			Scope: []string{MechOverlap}},
	}
}

// Update is one step's progress or result.
type Update struct {
	Step     string      // StepBaseline, …, "ab:<toggle name>", StepVerdict
	Index    int         // 1-based position in the report
	State    string      // "running" or "done"
	Finished int         // sessions finished so far (running twin steps)
	Total    int         // sessions of the run
	Result   *StepResult // set when State is "done"
}

// StepResult is one step's decisive result.
type StepResult struct {
	Step   string `json:"step"`
	Title  string `json:"title"`
	Result string `json:"result"` // the one-line decisive result
	// Lines are Result broken for plain text, where it is long (the
	// verdict: Verdict.Lines).
	Lines   []string `json:"-"`
	Pass    bool     `json:"pass"` // the step's binary test came out the way the result line says
	Bundle  string   `json:"bundle,omitempty"`
	Seconds float64  `json:"seconds,omitempty"`
}

// ToggleResult is one A/B arm's evidence.
type ToggleResult struct {
	Toggle  string          `json:"toggle"`
	Flag    string          `json:"flag"`
	Scope   []string        `json:"scope"`
	Summary outcome.Summary `json:"summary"`
	FisherP float64         `json:"fisher_p"`
	// Alpha is the level FisherP is judged at: sessions.Significance over
	// the number of toggles (Bonferroni, sessions.CompareOptions.Comparisons).
	Alpha     float64             `json:"alpha"`
	Confounds []sessions.Confound `json:"confounds"`
	// Removes: fewer corrupted sessions than the baseline with p < Alpha
	// and no confound.
	Removes bool   `json:"removes_corruption"`
	Bundle  string `json:"bundle,omitempty"`
}

// Evidence is everything Decide needs.
type Evidence struct {
	Baseline           outcome.Summary `json:"baseline"`
	Rooms              int             `json:"rooms"`
	RoomsMatched       int             `json:"rooms_matched"`
	RoomsWarmup        int             `json:"rooms_warmup"`
	RoomsMismatched    int             `json:"rooms_mismatched"`
	RoomsMissing       int             `json:"rooms_missing"`
	Replays            uint64          `json:"replays"`
	LivePageOverwrites uint64          `json:"live_page_overwrites"`
	GraphDiffSamples   int             `json:"graphdiff_samples"`
	DivergentSamples   int             `json:"divergent_samples"`
	DivergentSessions  int             `json:"divergent_sessions"`
	DivergentLeaked    int             `json:"divergent_sessions_leaked"`
	Toggles            []ToggleResult  `json:"toggles"`
}

// TransferClean: every non-warmup room matched and none is missing.
func (e Evidence) TransferClean() bool {
	return e.RoomsMismatched == 0 && e.RoomsMissing == 0 && e.RoomsMatched > 0
}

// BufferPristine: the canary saw replays and no live-page overwrite.
func (e Evidence) BufferPristine() bool { return e.Replays > 0 && e.LivePageOverwrites == 0 }

// GraphDiverges: the captured replay disagreed with eager on some sample.
func (e Evidence) GraphDiverges() bool { return e.DivergentSamples > 0 }

// Report is a whole demo.
type Report struct {
	Sessions    int          `json:"sessions"`
	Rounds      int          `json:"rounds"`
	Seed        uint64       `json:"seed"`
	Steps       []StepResult `json:"steps"`
	Evidence    Evidence     `json:"evidence"`
	Verdict     Verdict      `json:"verdict"`
	Out         string       `json:"out"`
	WallSeconds float64      `json:"wall_seconds"`
	Pictures    Pictures     `json:"pictures"` // report.html and timeline.json beside the bundles (pictures.go)
}

func (o *Options) defaults() error {
	if o.Sessions == 0 {
		o.Sessions = 80
	}
	if o.Rounds == 0 {
		o.Rounds = defaultRounds
	}
	if o.Sessions < 1 || o.Rounds < 1 {
		return fmt.Errorf("demo: sessions %d and rounds %d must be at least 1", o.Sessions, o.Rounds)
	}
	if o.Parallel <= 0 {
		o.Parallel = min(2, runtime.GOMAXPROCS(0))
	}
	if o.Toggles == nil {
		o.Toggles = DefaultToggles()
	}
	if o.Publish == nil {
		o.Publish = func(Update) {}
	}
	if o.Analyzers != nil {
		if miss := missingInstruments(o.Analyzers); len(miss) > 0 {
			return fmt.Errorf("demo: the analyzers given lack %s: the layer tests read their summaries", strings.Join(miss, ", "))
		}
	}
	if o.Out == "" {
		d, err := os.MkdirTemp("", "kvcanary-demo-")
		if err != nil {
			return fmt.Errorf("demo: make bundle dir: %w", err)
		}
		o.Out = d
	} else if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("demo: make bundle dir: %w", err)
	}
	return nil
}

// run is one twin run's outcome.
type run struct {
	name    string
	cfg     sim.Config
	bundle  string
	stats   *sessions.RunStats
	result  sim.Result
	sums    analyzers.Summaries // analyzer summaries (baseline only)
	seconds float64
	err     error
	done    chan struct{}
}

// Run performs the investigation. It returns the report, or an error when a
// run could not be performed (the report then holds the steps done so far).
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	start := opts.Now()
	runs, err := opts.plan()
	if err != nil {
		return nil, err
	}
	inv := &investigation{opts: &opts, runs: runs, progress: make([][2]int, len(runs)),
		rep: &Report{Sessions: opts.Sessions, Rounds: opts.Rounds, Seed: opts.Seed, Out: opts.Out}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait := inv.start(ctx)
	defer wait()
	if err := inv.baseline(); err != nil {
		return inv.rep, err
	}
	if err := inv.toggles(); err != nil {
		return inv.rep, err
	}
	// The verdict.
	inv.idx++
	opts.Publish(Update{Step: StepVerdict, Index: inv.idx, State: "running"})
	inv.rep.Verdict = Decide(inv.rep.Evidence)
	inv.finish(StepResult{Step: StepVerdict, Title: "verdict", Result: inv.rep.Verdict.Text, Lines: inv.rep.Verdict.Lines(), Pass: inv.rep.Verdict.Cause != ""})
	if err := inv.rep.pictures(opts, runs); err != nil { // report.html and timeline.json (pictures.go)
		return inv.rep, err
	}
	inv.rep.WallSeconds = opts.Now().Sub(start).Seconds()
	return inv.rep, nil
}

// plan is the runs: the baseline, then one per toggle (scheduler events
// only: outcomes and pressure are all A/B needs).
func (o *Options) plan() ([]*run, error) {
	base := sim.DefaultConfig()
	base.Seed = o.Seed
	if o.Base != nil {
		o.Base(&base)
	}
	runs := []*run{{name: "baseline", cfg: base}}
	for i, t := range o.Toggles {
		c := base
		c.Inject = append([]string(nil), base.Inject...)
		c.Instruments = sim.Instruments{Sched: true}
		t.Apply(&c)
		runs = append(runs, &run{name: fmt.Sprintf("ab%d", i+1), cfg: c})
	}
	for _, r := range runs {
		r.done = make(chan struct{})
		if err := r.cfg.Validate(); err != nil {
			return nil, fmt.Errorf("demo: %s configuration: %w", r.name, err)
		}
	}
	return runs, nil
}

// investigation is one Run: the runs, performed opts.Parallel at a time,
// and the steps that wait for them in report order.
type investigation struct {
	opts *Options
	runs []*run
	rep  *Report
	idx  int // the current step's index

	pmu      sync.Mutex
	progress [][2]int // sessions finished and total of each run
}

// start performs the runs on opts.Parallel workers; the returned function
// waits for the workers (cancel ctx first to stop them).
func (inv *investigation) start(ctx context.Context) (wait func()) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range inv.opts.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r := inv.runs[i]
				r.err = inv.opts.twin(ctx, r, i == 0, func(f, t int) {
					inv.pmu.Lock()
					inv.progress[i] = [2]int{f, t}
					inv.pmu.Unlock()
				})
				close(r.done)
			}
		}()
	}
	go func() {
		defer close(work)
		for i := range inv.runs {
			select {
			case work <- i:
			case <-ctx.Done():
				for _, r := range inv.runs[i:] {
					r.err = ctx.Err()
					close(r.done)
				}
				return
			}
		}
	}()
	return wg.Wait
}

// wait publishes run ri's progress as step's until it is done.
func (inv *investigation) wait(step string, ri int) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	r := inv.runs[ri]
	for {
		select {
		case <-r.done:
			return r.err
		case <-tick.C:
			inv.pmu.Lock()
			p := inv.progress[ri]
			inv.pmu.Unlock()
			inv.opts.Publish(Update{Step: step, Index: inv.idx, State: "running", Finished: p[0], Total: p[1]})
		}
	}
}

func (inv *investigation) finish(res StepResult) {
	inv.rep.Steps = append(inv.rep.Steps, res)
	inv.opts.Publish(Update{Step: res.Step, Index: inv.idx, State: "done", Result: &res})
}

// baseline is steps 1–4: the baseline and its three decisive tests.
func (inv *investigation) baseline() error {
	b := inv.runs[0]
	inv.idx++
	inv.opts.Publish(Update{Step: StepBaseline, Index: inv.idx, State: "running", Total: inv.opts.Sessions})
	if err := inv.wait(StepBaseline, 0); err != nil {
		return fmt.Errorf("demo: baseline run: %w", err)
	}
	ev := &inv.rep.Evidence
	ev.Baseline = b.stats.Summary()
	inv.finish(StepResult{Step: StepBaseline, Title: "baseline corruption (bf16 index-K, cuda graph, multi-stream overlap, PD)",
		Result: ev.Baseline.Headline(), Pass: ev.Baseline.CorruptedSessions > 0, Bundle: b.bundle, Seconds: b.seconds})
	fillEvidence(ev, b.sums)
	for _, s := range evidenceSteps(*ev, b.bundle) {
		inv.idx++
		inv.opts.Publish(Update{Step: s.Step, Index: inv.idx, State: "running"})
		inv.finish(s)
	}
	return nil
}

// toggles is steps 5–8: each A/B toggle against the baseline.
func (inv *investigation) toggles() error {
	b, ev := inv.runs[0], &inv.rep.Evidence
	for i, t := range inv.opts.Toggles {
		r := inv.runs[i+1]
		inv.idx++
		step := stepABPrefix + t.Name
		inv.opts.Publish(Update{Step: step, Index: inv.idx, State: "running", Total: inv.opts.Sessions})
		if err := inv.wait(step, i+1); err != nil {
			return fmt.Errorf("demo: run with %s: %w", t.Name, err)
		}
		ab := sessions.Compare(b.stats, r.stats, sessions.CompareOptions{Flag: t.Flag, Comparisons: len(inv.opts.Toggles)})
		tr := ToggleResult{Toggle: t.Name, Flag: t.Flag, Scope: t.Scope, Summary: r.stats.Summary(), FisherP: ab.FisherP, Alpha: ab.Level,
			Confounds: ab.Confounds, Bundle: r.bundle}
		if tr.Confounds == nil {
			tr.Confounds = []sessions.Confound{}
		}
		tr.Removes = tr.Summary.CorruptedSessions < ev.Baseline.CorruptedSessions && tr.FisherP < tr.Alpha && len(tr.Confounds) == 0
		ev.Toggles = append(ev.Toggles, tr)
		inv.finish(StepResult{Step: step, Title: "A/B " + t.Name, Result: toggleLine(ev.Baseline, tr), Pass: tr.Removes,
			Bundle: r.bundle, Seconds: r.seconds})
	}
	return nil
}

// twin performs one run through a pipeline: the bundle, the run's
// statistics and, for the baseline, the analyzers and the caller's Events
// tap; a toggle has scheduler events only (outcomes and pressure are all
// A/B needs).
func (o *Options) twin(ctx context.Context, r *run, baseline bool, progress func(int, int)) error {
	t0 := o.Now()
	r.bundle = filepath.Join(o.Out, r.fileName())
	r.stats = sessions.NewRunStats(r.bundle)
	rc := r.cfg.RunConfig()
	rc.Sessions, rc.Rounds, rc.Concurrency = o.Sessions, o.Rounds, o.Sessions
	host := hook.HostInfo{OS: "sim", Arch: "twin"}
	po := pipeline.Options{Record: r.bundle, Sinks: []hook.Publisher{r.stats},
		Manifest: traces.Manifest{Tool: o.Tool, Host: host, Config: rc, Run: fmt.Sprintf("demo-%s-seed%d", r.name, r.cfg.Seed), Command: "demo"}}
	if baseline {
		po.Analyzers = o.Analyzers
		if po.Analyzers == nil {
			po.Analyzers = analyzers.All(analyzers.Options{WarmupMaxSeqLen: sim.WarmupSeqLen})
		}
		if o.Events != nil {
			po.Sinks = append(po.Sinks, o.Events)
		}
	}
	p, err := pipeline.New(po)
	if err != nil {
		return fmt.Errorf("create bundle: %w", err)
	}
	r.stats.SetManifest(o.Tool, o.Now(), host, rc)
	wl := sim.DefaultWorkload()
	wl.Sessions, wl.Rounds, wl.Tool = o.Sessions, o.Rounds, o.Tool
	wl.Judge = outcome.Classifier{}.Outcome // the twin observes; repro judges, as against a real server
	tw := &pipeline.Twin{Config: r.cfg, Workload: wl, OnProgress: progress}
	if o.Parallel > 1 {
		tw.Config.Workers = 1 // runs, not rows, share the cores
	}
	res := p.Run(ctx, tw)
	runErr := res.SourceErr
	if res.RecordErr != nil && runErr == nil {
		runErr = fmt.Errorf("record %s: %w", r.bundle, res.RecordErr)
	}
	r.result = tw.Result
	r.sums = analyzers.SetOf(po.Analyzers...).Summaries()
	r.seconds = o.Now().Sub(t0).Seconds()
	return runErr
}

func (r *run) fileName() string {
	if r.name == "baseline" {
		return "baseline" + traces.Extension
	}
	if n := sanitize(r.cfg); n != "variant" {
		return "ab-" + n + traces.Extension
	}
	return r.name + "-variant" + traces.Extension // a toggle of its own: numbered, so two never share a file
}

// sanitize names a toggle run's file by what differs from the default, in
// words a person reads in a directory listing ("ab-overlap-off.kvtrace").
func sanitize(c sim.Config) string {
	d := sim.DefaultConfig()
	switch {
	case c.IndexKDtype != d.IndexKDtype:
		return "index-k-" + c.IndexKDtype
	case c.DisableCUDAGraph != d.DisableCUDAGraph:
		return "no-cuda-graph"
	case c.CUDAGraphMaxBS != d.CUDAGraphMaxBS:
		return fmt.Sprintf("cuda-graph-max-bs-%d", c.CUDAGraphMaxBS)
	case c.MultiStreamOverlap != d.MultiStreamOverlap:
		if c.MultiStreamOverlap {
			return "overlap-on"
		}
		return "overlap-off"
	}
	return "variant"
}

// missingInstruments names the analyzers fillEvidence reads that as lacks.
func missingInstruments(as []hook.Analyzer) []string {
	s := analyzers.SetOf(as...)
	var miss []string
	for _, m := range []struct {
		name string
		ok   bool
	}{{checksum.AnalyzerName, s.Checksum != nil}, {canary.AnalyzerName, s.Canary != nil}, {graphdiff.AnalyzerName, s.Graphdiff != nil}} {
		if !m.ok {
			miss = append(miss, m.name)
		}
	}
	return miss
}

// fillEvidence reads the analyzers' summaries of the baseline.
func fillEvidence(ev *Evidence, sums analyzers.Summaries) {
	if s := sums.Checksum; s != nil {
		ev.Rooms, ev.RoomsMatched, ev.RoomsWarmup, ev.RoomsMismatched, ev.RoomsMissing = s.Rooms, s.Matched, s.Warmup, s.Mismatched, s.Missing
	}
	if s := sums.Canary; s != nil {
		ev.Replays, ev.LivePageOverwrites = s.Replays, s.AllLiveOverwrites()
	}
	if s := sums.Graphdiff; s != nil {
		ev.GraphDiffSamples, ev.DivergentSamples, ev.DivergentSessions, ev.DivergentLeaked = s.Samples, s.Divergent, s.DivergentSessions, s.DivergentSessionsLeaked
	}
}

// evidenceSteps are steps 2–4: the three decisive layer tests.
func evidenceSteps(ev Evidence, bundle string) []StepResult {
	var out []StepResult
	tr := StepResult{Step: StepTransfer, Title: "transfer: per-room index-K checksums, prefill vs decode", Bundle: bundle, Pass: ev.TransferClean()}
	if tr.Pass {
		warmup := ""
		if ev.RoomsWarmup > 0 {
			warmup = fmt.Sprintf("; %d warmup", ev.RoomsWarmup)
		}
		tr.Result = fmt.Sprintf("transfer clean: %d/%d rooms match%s — the PD transfer delivers the bytes it was given",
			ev.RoomsMatched, ev.Rooms, warmup)
	} else {
		tr.Result = fmt.Sprintf("transfer DIRTY: %d of %d rooms mismatch, %d missing — the PD transfer corrupts or loses index-K",
			ev.RoomsMismatched, ev.Rooms, ev.RoomsMissing)
	}
	out = append(out, tr)
	bu := StepResult{Step: StepBuffer, Title: "persistent buffer: canary around every graph replay", Bundle: bundle, Pass: ev.BufferPristine()}
	if bu.Pass {
		bu.Result = fmt.Sprintf("buffer pristine: 0 live-page overwrites in %d replays — no replay writes a running request's pages", ev.Replays)
	} else {
		bu.Result = fmt.Sprintf("buffer OVERWRITTEN: %d live-page overwrites in %d replays", ev.LivePageOverwrites, ev.Replays)
	}
	out = append(out, bu)
	co := StepResult{Step: StepCompute, Title: "transient compute: graph replay vs eager on the same inputs", Bundle: bundle, Pass: ev.GraphDiverges()}
	if co.Pass {
		co.Result = fmt.Sprintf("graph ≠ eager: %d of %d samples diverge (top-k selections) in %d sessions, %d of which leaked",
			ev.DivergentSamples, ev.GraphDiffSamples, ev.DivergentSessions, ev.DivergentLeaked)
	} else {
		co.Result = fmt.Sprintf("graph = eager: 0 of %d samples diverge", ev.GraphDiffSamples)
	}
	out = append(out, co)
	return out
}

func toggleLine(base outcome.Summary, tr ToggleResult) string {
	s := tr.Summary
	conf := "no confounds"
	if n := len(tr.Confounds); n > 0 {
		conf = fmt.Sprintf("%d confound(s): ", n)
		for i, c := range tr.Confounds {
			if i > 0 {
				conf += ", "
			}
			conf += fmt.Sprintf("%s %v→%v", c.Name, c.A, c.B)
		}
	}
	effect := "does not remove it"
	switch {
	case tr.Removes:
		effect = "removes it"
	case s.CorruptedSessions < base.CorruptedSessions && tr.FisherP < tr.Alpha:
		effect = "lowers it, but confounded"
	case s.CorruptedSessions > base.CorruptedSessions && tr.FisherP < tr.Alpha:
		effect = "makes it worse"
	case s.CorruptedSessions < base.CorruptedSessions:
		effect = "lowers it, but not significantly at this size"
	}
	return fmt.Sprintf("%d/%d → %d/%d corrupted (%.0f%% → %.0f%%), Fisher p = %s (level %s), %s: %s",
		base.CorruptedSessions, base.Sessions, s.CorruptedSessions, s.Sessions, 100*base.CorruptionRate, 100*s.CorruptionRate,
		sessions.FormatP(tr.FisherP), sessions.FormatP(tr.Alpha), conf, effect)
}
