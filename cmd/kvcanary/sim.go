package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
)

// NewCmdSim builds `kvcanary sim`, the parent of the twin's commands.
func NewCmdSim(f *cmdutil.Factory) *cobra.Command {
	return newGroupCmd(groupHelp{
		Use:   "sim",
		Short: "Run the embedded twin: a deterministic serving runtime with the seeds' bug",
		Example: `  kvcanary sim run --sessions 80 --rounds 4
  kvcanary sim run --index-k-dtype fp8 --json
  kvcanary sim serve --addr 127.0.0.1:30000`,
		Long: `The twin is a small deterministic serving runtime with the anatomy of the seeds'
SGLang stack: paged bf16/fp8 index-K arenas, PD disaggregation, continuous
batching with retraction, captured decode graphs with multi-stream overlap and
a sparse top-k indexer. Its corruption emerges from the data path, so every
kvcanary instrument can be tested against ground truth.`,
	}, NewCmdSimRun(f, nil))
}

// engineFlags are the twin's engine and instrument flags, shared by every
// command that runs the twin (sim run, sim serve, watch --sim).
type engineFlags struct {
	cfg          sim.Config
	noChecksum   bool
	noCanary     bool
	noGraphDiff  bool
	gdEvery      int
	gdTopKOnly   bool
	canaryPolicy string
	logFile      string
}

// addEngineFlags registers the engine flags (named after SGLang's) on cmd.
func addEngineFlags(cmd *cobra.Command) *engineFlags {
	ef := &engineFlags{cfg: sim.DefaultConfig()}
	fl := cmd.Flags()
	c := &ef.cfg
	fl.StringVar(&c.IndexKDtype, "index-k-dtype", c.IndexKDtype, "index-K dtype: bf16 or fp8")
	fl.BoolVar(&c.DisableCUDAGraph, "disable-cuda-graph", false, "run every decode step eagerly")
	fl.IntVar(&c.CUDAGraphMaxBS, "cuda-graph-max-bs", c.CUDAGraphMaxBS, "largest batch size with a captured graph (larger batches run eagerly)")
	fl.BoolVar(&c.MultiStreamOverlap, "multi-stream-overlap", c.MultiStreamOverlap, "run the indexer on an alternate stream inside captured graphs (SGLANG_OPT_USE_MULTI_STREAM_OVERLAP)")
	fl.StringVar(&c.Disaggregation, "disaggregation", c.Disaggregation, "prefill/decode disaggregation: pd or none")
	fl.IntVar(&c.MaxRunningRequests, "max-running-requests", c.MaxRunningRequests, "most requests decoding at once")
	fl.IntVar(&c.PoolTokens, "pool-tokens", c.PoolTokens, "decode index-K pool capacity in tokens")
	fl.StringArrayVar(&c.Inject, "inject", nil, "inject a fault: "+strings.Join(sim.Faults, ", ")+" (repeatable)")
	fl.IntVar(&c.SpeculativeEagleTopK, "speculative-eagle-topk", 0, "speculative decoding draft-tree branching: 2 or more moves accepted tokens from draft slots to their final slots between decode steps (IndexKeyCache.move); 0/1 none (spec-move implies 2)")
	fl.BoolVar(&ef.noChecksum, "no-checksum", false, "turn off per-room transfer checksums")
	fl.BoolVar(&ef.noCanary, "no-canary", false, "turn off the replay page canary")
	fl.BoolVar(&ef.noGraphDiff, "no-graphdiff", false, "turn off graph-vs-eager sampling")
	fl.IntVar(&ef.gdEvery, "graphdiff-every", sim.DefaultGraphDiffEvery, "graph-vs-eager: sample every Nth replay (and every step of flagged sessions)")
	fl.BoolVar(&ef.gdTopKOnly, "graphdiff-topk-only", false, "graph-vs-eager samples carry only the top-k selections")
	fl.StringVar(&ef.canaryPolicy, "canary-policy", "live", "pages the canary digests: live, all or sweep:N")
	fl.StringVar(&ef.logFile, "log-file", "", "write SGLang-format scheduler lines to this file")
	_ = cmd.RegisterFlagCompletionFunc("inject", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return sim.Faults, cobra.ShellCompDirectiveNoFileComp
	})
	return ef
}

// config returns the engine configuration the flags describe (seed set by
// the caller); the error names the bad flag.
func (ef *engineFlags) config(seed uint64) (sim.Config, error) {
	c := ef.cfg
	c.Seed = seed
	c.Inject = append([]string(nil), c.Inject...)
	c.Instruments = sim.AllInstruments()
	c.Instruments.Checksum = !ef.noChecksum
	c.Instruments.Canary = !ef.noCanary
	c.Instruments.CanaryPolicy = ef.canaryPolicy
	c.Instruments.GraphDiff = !ef.noGraphDiff
	c.Instruments.GraphDiffEvery = ef.gdEvery
	c.Instruments.GraphDiffTopKOnly = ef.gdTopKOnly
	if err := c.Validate(); err != nil {
		return c, cmdutil.UsageError("--%w", err)
	}
	return c, nil
}

// openLog points cfg.Log at --log-file (buffered) when it is set; the
// returned function flushes and closes it.
func (ef *engineFlags) openLog(cfg *sim.Config) (func() error, error) {
	if ef.logFile == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(ef.logFile)
	if err != nil {
		return nil, cmdutil.InputError(fmt.Errorf("open log file: %w", err))
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	cfg.Log = bw
	return func() error {
		ferr := bw.Flush()
		if cerr := f.Close(); ferr == nil {
			ferr = cerr
		}
		return ferr
	}, nil
}

// engineConfigJSON is the config section of sim run --json: every engine flag.
type engineConfigJSON struct {
	IndexKDtype        string   `json:"index_k_dtype"`
	DisableCUDAGraph   bool     `json:"disable_cuda_graph"`
	CUDAGraphMaxBS     int      `json:"cuda_graph_max_bs"`
	MultiStreamOverlap bool     `json:"multi_stream_overlap"`
	Disaggregation     string   `json:"disaggregation"`
	MaxRunningRequests int      `json:"max_running_requests"`
	PoolTokens         int      `json:"pool_tokens"`
	Inject             []string `json:"inject"`
	SpecEagleTopK      int      `json:"speculative_eagle_topk,omitempty"`
	Seed               uint64   `json:"seed"`
	Checksum           bool     `json:"checksum"`
	Canary             bool     `json:"canary"`
	CanaryPolicy       string   `json:"canary_policy"`
	GraphDiff          bool     `json:"graphdiff"`
	GraphDiffEvery     int      `json:"graphdiff_every"`
	GraphDiffTopKOnly  bool     `json:"graphdiff_topk_only"`
}

func configJSON(c sim.Config) engineConfigJSON {
	inj := c.Inject
	if inj == nil {
		inj = []string{}
	}
	return engineConfigJSON{IndexKDtype: c.IndexKDtype, DisableCUDAGraph: c.DisableCUDAGraph, CUDAGraphMaxBS: c.CUDAGraphMaxBS,
		MultiStreamOverlap: c.MultiStreamOverlap, Disaggregation: c.Disaggregation, MaxRunningRequests: c.MaxRunningRequests,
		PoolTokens: c.PoolTokens, Inject: inj, SpecEagleTopK: c.SpeculativeEagleTopK, Seed: c.Seed, Checksum: c.Instruments.Checksum, Canary: c.Instruments.Canary,
		CanaryPolicy: c.Instruments.CanaryPolicy, GraphDiff: c.Instruments.GraphDiff, GraphDiffEvery: c.Instruments.GraphDiffEvery,
		GraphDiffTopKOnly: c.Instruments.GraphDiffTopKOnly}
}

// SimRunOptions are the inputs of `kvcanary sim run`.
type SimRunOptions struct {
	IO       *cmdutil.IOStreams
	Factory  *cmdutil.Factory
	Engine   *engineFlags
	Sessions int
	Rounds   int
	Seed     uint64
	Record   string
	Run      string // run id of the bundle and its events
	JSON     *cmdutil.JSONFlags
}

// NewCmdSimRun builds `kvcanary sim run`.
func NewCmdSimRun(f *cmdutil.Factory, runF func(*SimRunOptions) error) *cobra.Command {
	opts := &SimRunOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run multi-turn tool-calling sessions on the twin and report the corruption rate",
		Long: `Run --sessions multi-turn tool-calling sessions on the twin, all in flight at
once (the twin has no --concurrency: its concurrency is the session count;
"kvcanary repro --concurrency" caps it against a server), and classify each
(done, maxrounds, leak, no_tool, error, timeout). Every instrument is on by
default (room checksums, replay canary, graph-vs-eager sampling); each has a
flag to turn it off. The run is deterministic for a given seed.`,
		Example: `  kvcanary sim run --sessions 80 --rounds 4 --seed 1
  kvcanary sim run --index-k-dtype fp8 --json
  kvcanary sim run --multi-stream-overlap=false --pool-tokens 60000
  kvcanary sim run --inject transfer-race --record run.kvtrace
  kvcanary sim run --inject spec-move --multi-stream-overlap=false --record spec.kvtrace`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Sessions < 1 || opts.Rounds < 1 {
				return cmdutil.UsageError("--sessions and --rounds must be at least 1")
			}
			if opts.Sessions > maxSimSessions {
				return cmdutil.UsageError("--sessions %d: at most %d (the twin holds every session's conversation in memory)", opts.Sessions, maxSimSessions)
			}
			if opts.Rounds > sim.MaxRounds {
				return cmdutil.UsageError("--rounds %d: at most %d (the twin's %d-token context is full by about the 17th round)", opts.Rounds, sim.MaxRounds, sim.ContextLen)
			}
			return runOr(opts, runF, simRunRun)
		},
	}
	opts.Engine = addEngineFlags(cmd)
	cmd.Flags().IntVar(&opts.Sessions, "sessions", 80, fmt.Sprintf("sessions to run, all in flight at once on the twin (1 to %d)", maxSimSessions))
	cmd.Flags().IntVar(&opts.Rounds, "rounds", 4, fmt.Sprintf("most rounds per session (1 to %d)", sim.MaxRounds))
	cmd.Flags().Uint64Var(&opts.Seed, "seed", 1, "seed of the workload, rooms and stream interleaving")
	cmd.Flags().StringVar(&opts.Record, "record", "", "record every event to this trace bundle")
	cmd.Flags().StringVar(&opts.Run, "run", "", "with --record: run `ID` of the bundle and every event (default sim-seed<seed>)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

// maxSimSessions bounds `sim run --sessions`: the twin keeps every session's
// conversation and pages, so an unbounded count only ends in the OOM killer.
const maxSimSessions = 10000

func simRunRun(opts *SimRunOptions) error {
	cfg, err := opts.Engine.config(opts.Seed)
	if err != nil {
		return err
	}
	closeLog, err := opts.Engine.openLog(&cfg)
	if err != nil {
		return err
	}
	defer closeLog()
	as := analyzers.All(analyzers.Options{WarmupMaxSeqLen: sim.WarmupSeqLen})
	po := pipeline.Options{Analyzers: as}
	if opts.Record != "" {
		rc := cfg.RunConfig()
		rc.Sessions, rc.Rounds = opts.Sessions, opts.Rounds
		po.StampRun = cmp.Or(opts.Run, fmt.Sprintf("sim-seed%d", opts.Seed))
		po.Record, po.Manifest = opts.Record, traces.Manifest{Tool: "kvcanary " + buildinfo.String(), Host: hook.HostInfo{OS: "sim", Arch: "twin"},
			Config: rc, Run: po.StampRun, Command: "sim run"}
	}
	p, err := pipeline.New(po)
	if err != nil {
		return cmdutil.InputError(err) // traces says "create bundle: …"
	}
	twin := &pipeline.Twin{Config: cfg, Workload: simWorkload(opts.Sessions, opts.Rounds)}
	line := pipeline.NewStatusLine(opts.IO.ErrOut, opts.IO.IsStderrTTY(), opts.Factory.Now)
	twin.OnProgress = func(done, total int) {
		line.Set(fmt.Sprintf("sim run: %d/%d sessions finished", done, total))
		if done == total {
			line.Clear()
		}
	}
	res := p.Run(factoryCtx(opts.Factory), twin)
	if res.SourceErr != nil || res.ViewErr != nil {
		return res.Err()
	}
	// The run completed: its summary is printed even when the recording
	// failed (a full disk), then the recording's error (exit 3).
	sums := analyzers.SetOf(as...).Summaries()
	var outErr error
	if opts.JSON.JSON {
		outErr = cmdutil.WriteJSON(opts.IO.Out, simRunJSON(cfg, twin.Result, sums.Sections()))
	} else {
		outErr = writeSimRunText(opts.IO.Out, cfg, twin.Result, sums)
	}
	if err := res.Err(); err != nil {
		return cmdutil.InputError(fmt.Errorf("%w (%d events recorded, %d lost: the summary above is of the whole run, the bundle holds less)", err, res.Recorded, res.RecordLost))
	}
	return outErr
}

// simWorkload is the twin's default workload at this size, judged by repro's
// classifier (the twin observes; repro judges, as `kvcanary repro` does a
// real server).
func simWorkload(sessions, rounds int) sim.Workload {
	w := sim.DefaultWorkload()
	w.Sessions, w.Rounds = sessions, rounds
	w.Tool = "kvcanary " + buildinfo.String()
	w.Judge = outcome.Classifier{}.Outcome
	return w
}

// factoryCtx is the command's context (Background when a test gave none).
func factoryCtx(f *cmdutil.Factory) context.Context {
	if f == nil {
		return context.Background()
	}
	return orBackground(f.Ctx)
}

// simSummary is the run's outcome.Summary (the shared sessions/outcomes/rate
// shape every reproducer reports).
func simSummary(res sim.Result) outcome.Summary {
	var o outcome.Counts
	for _, s := range res.PerSession {
		o.Add(s.Outcome)
	}
	return outcome.SummaryOf(o, res.Rounds, time.Duration(res.WallSeconds*float64(time.Second)))
}

// simRunJSON is the one --json object of sim run.
func simRunJSON(cfg sim.Config, res sim.Result, sections map[string]any) map[string]any {
	sum := simSummary(res)
	out := map[string]any{
		"config":             configJSON(cfg),
		"sessions":           sum.Sessions,
		"rounds":             sum.Rounds,
		"outcomes":           sum.Outcomes,
		"corrupted_sessions": sum.CorruptedSessions,
		"corruption_rate":    sum.CorruptionRate,
		"wilson95":           sum.Wilson95,
		"deviated_sessions":  res.Deviated,
		"sched": map[string]any{
			"peak_running_req": res.Stats.PeakRunningReq,
			"retractions":      res.Stats.Retractions,
			"peak_token_usage": res.Stats.PeakTokenUsage,
			"graph_replays":    res.Stats.GraphReplays,
			"eager_steps":      res.Stats.EagerSteps,
			"requests":         res.Stats.Requests,
			"spec_moves":       res.Stats.SpecMoves,
			"spec_move_errors": res.Stats.SpecMoveErrors,
		},
		"steps":         res.Stats.Steps,
		"decode_tokens": res.Stats.DecodeTokens,
		"wall_seconds":  res.WallSeconds,
	}
	for k, v := range sections {
		if _, taken := out[k]; !taken {
			out[k] = v
		}
	}
	return out
}

func writeSimRunText(w io.Writer, cfg sim.Config, res sim.Result, sums analyzers.Summaries) error {
	o := res.Outcomes
	fmt.Fprintln(w, simSummary(res).Headline())
	fmt.Fprintf(w, "outcomes: done=%d maxrounds=%d leak=%d no_tool=%d error=%d timeout=%d (deviated from script: %d)\n",
		o[hook.OutcomeDone], o[hook.OutcomeMaxRounds], o[hook.OutcomeLeak], o[hook.OutcomeNoTool], o[hook.OutcomeError], o[hook.OutcomeTimeout], res.Deviated)
	graph := "on"
	if cfg.DisableCUDAGraph {
		graph = "off"
	}
	overlap := "off"
	if cfg.MultiStreamOverlap {
		overlap = "on"
	}
	fmt.Fprintf(w, "engine: index-K %s, cuda graph %s (max bs %d), multi-stream overlap %s, disaggregation %s, max running %d, pool %d tokens",
		cfg.IndexKDtype, graph, cfg.CUDAGraphMaxBS, overlap, cfg.Disaggregation, cfg.MaxRunningRequests, cfg.PoolTokens)
	if cfg.SpeculativeEagleTopK > 1 {
		fmt.Fprintf(w, ", speculative eagle topk %d", cfg.SpeculativeEagleTopK)
	}
	if len(cfg.Inject) > 0 {
		fmt.Fprintf(w, ", inject %s", strings.Join(cfg.Inject, ","))
	}
	fmt.Fprintf(w, ", seed %d\n", cfg.Seed)
	s := res.Stats
	fmt.Fprintf(w, "sched: peak running-req %d, retractions %d, peak token usage %.2f, steps %d (graph %d, eager %d), decode tokens %d\n",
		s.PeakRunningReq, s.Retractions, s.PeakTokenUsage, s.Steps, s.GraphReplays, s.EagerSteps, s.DecodeTokens)
	if s.SpecMoves > 0 {
		fmt.Fprintf(w, "speculative moves: %d IndexKeyCache.move calls, %d failed out of bounds (torch would raise; on CUDA a device-side assert)\n", s.SpecMoves, s.SpecMoveErrors)
	}
	fmt.Fprintf(w, "wall: %.2fs (%.0f steps/s, %.0f tokens/s)\n", res.WallSeconds,
		float64(s.Steps)/res.WallSeconds, float64(s.DecodeTokens)/res.WallSeconds)
	return writeSimRunSections(w, sums)
}
