package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/pyhook"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/runconfig"
	"github.com/kvcanary/kvcanary/traces"
	"github.com/kvcanary/kvcanary/tui"
)

// WrapOptions are the inputs of `kvcanary wrap`.
type WrapOptions struct {
	IO      *cmdutil.IOStreams
	Factory *cmdutil.Factory
	JSON    *cmdutil.JSONFlags

	Command  []string // COMMAND and its arguments, after --
	Record   string
	Watch    bool
	Log      string // with --watch: where the command's output goes
	Engine   string
	Run      string
	Config   []string // KEY=VALUE engine settings the user states
	CacheDir string
	Drain    time.Duration
	Export   exportOptions

	// Settings are the KVCANARY_* variables set from flags the user gave,
	// in flag order; settings not given are left to the Python defaults.
	Settings []WrapSetting

	// Tests replace these.
	environ       []string                                              // the command's base environment (default os.Environ())
	signals       <-chan os.Signal                                      // default: SIGINT and SIGTERM of this process
	started       func(pid int)                                         // called once the command runs
	runTUI        func(context.Context, tui.Options) (tui.Stats, error) // default tui.Run
	progressEvery time.Duration                                         // default 10s
	quiet         time.Duration                                         // see drainProducers; default 250ms
	extract       func(cacheDir string) (string, error)                 // default pyhook.Extract
}

// WrapSetting is one KVCANARY_* variable wrap sets for the command.
type WrapSetting struct {
	Flag  string `json:"flag"`
	Env   string `json:"env"`
	Value string `json:"value"`
}

// wrapSettingFlags are the instrument settings of CONTRACT.md's table that
// wrap exposes as flags; def is the Python default, shown in --help.
var wrapSettingFlags = []struct {
	flag, env, def, usage string
	check                 func(string) error
}{
	{"instruments", "KVCANARY_INSTRUMENTS", "checksum,canary,graphdiff", "`LIST` of instruments to enable, comma-separated: checksum, canary, graphdiff", checkInstruments},
	{"canary-policy", "KVCANARY_CANARY_POLICY", "live", "`POLICY` of the pages the canary digests around a replay: live, all or sweep:N (canary/SPEC.md §4)", checkCanaryPolicy},
	{"canary-every", "KVCANARY_CANARY_EVERY", "64", "check one decode step in `N` (forward_pass_id % N == 0 on every rank)", checkEvery},
	{"graphdiff-every", "KVCANARY_GRAPHDIFF_EVERY", "256", "rerun one graph step in `N` eagerly (forward_pass_id % N == 0 on every rank)", checkEvery},
	{"graphdiff-layers", "KVCANARY_GRAPHDIFF_LAYERS", "", "indexer layer `IDS` whose top-k selections are compared: comma-separated model layer ids (DeepSeek-V4: its C4 layers) or all (package default: none; opt-in because installing a top-k capturer changes the captured graph, and the run's notes say so when it is on)", checkLayers},
	{"graphdiff-logits", "KVCANARY_GRAPHDIFF_LOGITS", "topk:20", "`WHAT` of next_token_logits a sample carries: full, topk:N or none", checkLogits},
}

// wrapLong is the long help of `kvcanary wrap`.
const wrapLong = `Run COMMAND (an SGLang server, a benchmark, any Python program) with kvcanary's
in-engine hooks: room checksums after PD transfers, canaries around decode graph
replays, graph-vs-eager reruns of sampled steps. wrap

  - starts a collector on a private socket (mode 0600, in a 0700 directory);
  - extracts the Python package this binary carries (once per version, see
    "kvcanary pyhook path") and puts it first on PYTHONPATH, ahead of yours:
    its sitecustomize hooks SGLang in every process the engine spawns;
  - sets KVCANARY_ADDR, KVCANARY_RUN and the settings given as flags below
    (a setting not given keeps its value from your environment, else the
    package's default, shown as the flag's default below). wrap collects
    locally: it refuses to run with KVCANARY_ADDR or KVCANARY_TLS_* already
    set (to stream to a remote collector, run the engine without wrap, with
    "kvcanary pyhook path" first on PYTHONPATH);
  - runs COMMAND in its own process group: Ctrl-C or SIGTERM is forwarded to
    the whole group, a second one kills it (SIGKILL); its stdin is wrap's,
    unless that is a terminal (then /dev/null);
  - records every event to --record, losslessly, with the settings given and
    the run's configuration: engine sglang (--engine), the engine flags
    stated with --config (labelled as stated by you), and what each hooked
    scheduler process reports from inside (provenance "engine": cuda_graph,
    cuda_graph_max_bs, multi_stream_overlap from
    SGLANG_OPT_USE_MULTI_STREAM_OVERLAP, index_k_dtype from the index-K
    buffers, disaggregation, tp_size, and extra.* for the fp4 indexer, the
    speculative algorithm, the architecture and the SGLang version). A
    --config value the engine contradicts is printed as a CONTRADICTION with
    both values; the engine's is used, since it is what ran. What nobody
    reported stays unknown — never read as off;
  - shows the live dashboard with --watch (a terminal; the command's output
    then goes to --log), else prints progress lines to stderr;
  - at the end prints each layer's verdict — transfer (room checksums),
    buffer (replay canaries), compute (graph vs eager) — or "not measured"
    where no events came, and "partial", never "ok", where clean work was
    seen but not all of it: an instrument a producer reported off, events
    dropped, rooms seen on one side only, producers that ended without
    their run.end (SIGKILLed, cut off by --drain), or a TP rank that never
    reported although its role's processes said how many ranks there are
    ("decode rank 1 of 2 never reported"). The sampled layers say how much
    they looked at: the canary how many of the run's replays it checked,
    graph-vs-eager how many of its graph replays it reran (a short run the
    default rates miss gets the flag that samples it). On one PD host the
    checksum layer sees one side only: compare both hosts' bundles with
    "kvcanary checksum compare".

With --json the summary is one JSON object on stdout, and the command's
stdout goes to stderr.

Exit status: the command's own exit status; 128+N when a signal N killed it
(130 for SIGINT, 137 for SIGKILL); 2 for a usage error; 3 when the command
could not be started or kvcanary failed (socket, package, bundle) while the
command itself succeeded. Findings do not change it: judge the bundle with
checksum compare, canary report or graphdiff report for a check's exit code.`

// NewCmdWrap builds `kvcanary wrap`.
func NewCmdWrap(f *cmdutil.Factory, runF func(*WrapOptions) error) *cobra.Command {
	opts := &WrapOptions{IO: f.IO, Factory: f}
	values := make([]string, len(wrapSettingFlags))
	cmd := &cobra.Command{
		Use:   "wrap [flags] -- COMMAND [ARG...]",
		Short: "Run an engine with kvcanary's hooks inside, collect and judge their events",
		Long:  wrapLong,
		Example: `  # decode host of a PD pair, recording for an offline compare
  kvcanary wrap --record decode.kvtrace -- python3 -m sglang.launch_server --disaggregation-mode decode ...
  kvcanary wrap --record prefill.kvtrace -- python3 -m sglang.launch_server --disaggregation-mode prefill ...
  kvcanary checksum compare prefill.kvtrace decode.kvtrace

  # watch it live, canary on every page, graph-vs-eager on one step in 64
  kvcanary wrap --watch --canary-policy all --graphdiff-every 64 --log server.log -- python3 -m sglang.launch_server ...

  # state the engine flags under test, so "kvcanary ab" can name them
  kvcanary wrap --record a.kvtrace --config cuda_graph=on --config multi_stream_overlap=off -- python3 -m sglang.launch_server ...`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmdutil.UsageError("wrap: give the command after --: kvcanary wrap [flags] -- COMMAND [ARG...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.check(cmd.Flags(), args, values); err != nil {
				return err
			}
			return runOr(opts, runF, wrapRun)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // everything after COMMAND is COMMAND's
	fl.StringVar(&opts.Record, "record", "", "record every event to this trace bundle `FILE` (.kvtrace)")
	fl.BoolVar(&opts.Watch, "watch", false, "show the live dashboard (needs a terminal)")
	fl.StringVar(&opts.Log, "log", "", "with --watch: write the command's stdout and stderr to `FILE` (default <run>.log)")
	fl.StringVar(&opts.Engine, "engine", "sglang", "`NAME` of the engine in the run's configuration")
	fl.StringVar(&opts.Run, "run", "", "run `ID` put on every event (default wrap-<UTC time>)")
	fl.StringArrayVar(&opts.Config, "config", nil, "state an engine setting, `KEY=VALUE` (cuda_graph=on, multi_stream_overlap=off, index_k_dtype=fp8|fp4|bf16, cuda_graph_max_bs=N, tp_size=N, disaggregation=pd, max_running_requests=N, pool_tokens=N, model=NAME, other keys kept as given); repeatable")
	fl.StringVar(&opts.CacheDir, "cache-dir", "", "extract the Python package under `DIR` (default: the user cache directory)")
	fl.DurationVar(&opts.Drain, "drain", 5*time.Second, "after the command exits, how long to wait for its producers' last events")
	for i, s := range wrapSettingFlags {
		usage := fmt.Sprintf("%s; sets %s", s.usage, s.env)
		fl.StringVar(&values[i], s.flag, s.def, usage)
	}
	addExportFlags(cmd, &opts.Export)
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

// check takes the command and the engine-setting flags given (values, in
// wrapSettingFlags order) into the options; a usage error otherwise.
func (o *WrapOptions) check(fl *pflag.FlagSet, args, values []string) error {
	o.Command = args
	for i, s := range wrapSettingFlags {
		if !fl.Changed(s.flag) {
			continue
		}
		if err := s.check(values[i]); err != nil {
			return cmdutil.UsageError("wrap: --%s %s: %w", s.flag, strconv.Quote(values[i]), err)
		}
		o.Settings = append(o.Settings, WrapSetting{Flag: s.flag, Env: s.env, Value: values[i]})
	}
	if _, err := wrapRunConfig(o.Engine, o.Config); err != nil {
		return err
	}
	if o.Watch && o.JSON.JSON {
		return cmdutil.UsageError("wrap: --watch and --json do not go together: the dashboard owns the terminal")
	}
	if o.Log != "" && !o.Watch {
		return cmdutil.UsageError("wrap: --log needs --watch (without it the command's output stays on this terminal)")
	}
	if o.Drain < 0 {
		return cmdutil.UsageError("wrap: --drain %s is negative", o.Drain)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Settings.

var wrapInstruments = []string{"checksum", "canary", "graphdiff"}

func checkInstruments(v string) error {
	seen := map[string]bool{}
	for i, x := range strings.Split(v, ",") {
		x = strings.TrimSpace(x)
		switch {
		case x == "":
			return fmt.Errorf("item %d is empty; want a comma list of %s", i+1, strings.Join(wrapInstruments, ", "))
		case !slices.Contains(wrapInstruments, x):
			return fmt.Errorf("item %d %q is no instrument; want %s", i+1, x, strings.Join(wrapInstruments, ", "))
		case seen[x]:
			return fmt.Errorf("item %d %q repeats", i+1, x)
		}
		seen[x] = true
	}
	return nil
}

// positiveInt parses a decimal integer ≥ 1.
func positiveInt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not a whole number of at least 1", s)
	}
	return n, nil
}

func checkCanaryPolicy(v string) error {
	return checkWordOrCount(v, []string{"live", "all"}, "sweep", "want live, all or sweep:N")
}

func checkEvery(v string) error {
	_, err := positiveInt(v)
	return err
}

func checkLayers(v string) error {
	if v == "" || v == "all" {
		return nil
	}
	seen := map[int]bool{}
	for i, x := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil || n < 0 {
			return fmt.Errorf("item %d %q is not a layer id (a whole number ≥ 0); want comma ids or all", i+1, x)
		}
		if seen[n] {
			return fmt.Errorf("item %d: layer %d repeats", i+1, n)
		}
		seen[n] = true
	}
	return nil
}

func checkLogits(v string) error {
	return checkWordOrCount(v, []string{"full", "none"}, "topk", "want full, topk:N or none")
}

// checkWordOrCount accepts one of words or prefix:N with N a whole number of
// at least 1; anything else is the error want.
func checkWordOrCount(v string, words []string, prefix, want string) error {
	if slices.Contains(words, v) {
		return nil
	}
	n, ok := strings.CutPrefix(v, prefix+":")
	if !ok {
		return errors.New(want)
	}
	if _, err := positiveInt(n); err != nil {
		return fmt.Errorf("%s:N: %w", prefix, err)
	}
	return nil
}

// wrapRunConfig builds the run's configuration from --engine and --config:
// each stated setting is known with provenance "label"; cuda_graph and
// multi_stream_overlap, which wrap cannot observe, stay unknown (nil) unless
// stated — never a guessed false.
func wrapRunConfig(engine string, kvs []string) (hook.RunConfig, error) {
	rc := hook.RunConfig{Engine: engine, Provenance: map[string]string{}}
	if err := repro.ParseLabels(&rc, "--config", kvs); err != nil {
		return rc, cmdutil.UsageError("wrap: %w", err)
	}
	return rc, nil
}

// wrapCollectorEnv are the variables that point a producer at a collector.
// wrap sets KVCANARY_ADDR to its own socket (the TLS settings then have
// nothing to apply to), so one already set means the user wants another
// collector, which wrap would silently bypass.
var wrapCollectorEnv = []string{"KVCANARY_ADDR", hook.EnvTLSCert, hook.EnvTLSKey, hook.EnvTLSCA}

// wrapRefuseRemote refuses an environment that names a collector.
func wrapRefuseRemote(env []string) error {
	var set []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if v != "" && slices.Contains(wrapCollectorEnv, k) && !slices.Contains(set, k) {
			set = append(set, k)
		}
	}
	if len(set) == 0 {
		return nil
	}
	return cmdutil.UsageError("wrap: %s set in this environment, but wrap collects locally: it gives the engine its own "+
		"collector socket, so nothing would reach the collector those name. To record on this host, unset them and use "+
		"--record FILE (then combine hosts with \"kvcanary trace merge\"); to stream to a remote collector, run the "+
		"engine without wrap, with the directory \"kvcanary pyhook path\" prints first on PYTHONPATH and "+
		"KVCANARY_ADDR and KVCANARY_TLS_* set", strings.Join(set, ", "))
}

// wrapEnv is the command's environment: base, with the package first on
// PYTHONPATH (the user's entries after it), the collector's address, the
// run id and the settings given.
func wrapEnv(base []string, pyDir, addr, run string, settings []WrapSetting) []string {
	set := map[string]string{"KVCANARY_ADDR": addr, "KVCANARY_RUN": run}
	for _, s := range settings {
		set[s.Env] = s.Value
	}
	env := make([]string, 0, len(base)+len(set)+1)
	for _, kv := range pyhook.WithPythonPath(base, pyDir) {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := set[k]; !over {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+set[k])
	}
	return env
}

// ---------------------------------------------------------------------------
// Running.

// WrapSummary is the --json shape of `kvcanary wrap`.
type WrapSummary struct {
	Run        string        `json:"run"`
	Command    []string      `json:"command"`
	PythonPath string        `json:"pythonpath"` // the extracted package directory
	Settings   []WrapSetting `json:"settings"`   // set from flags; others are the package defaults
	ExitCode   int           `json:"exit_code"`
	Signal     string        `json:"signal,omitempty"`    // the signal that ended the command
	Forwarded  []string      `json:"forwarded,omitempty"` // signals passed to its process group
	DurationNS int64         `json:"duration_ns"`

	Events          uint64            `json:"events"`
	ByKind          map[string]uint64 `json:"by_kind"`
	Connections     uint64            `json:"connections"`
	Rejected        uint64            `json:"rejected"`
	RejectedBy      map[string]uint64 `json:"rejected_by"`
	Dropped         uint64            `json:"dropped"`
	DroppedRecorder uint64            `json:"dropped_recorder"`
	DroppedProducer uint64            `json:"dropped_producers"`
	// CutOff counts producers still connected when --drain ran out: what
	// they sent afterwards is lost, uncounted.
	CutOff int `json:"producers_cut_off,omitempty"`
	// GroupLeft is the command's process group when processes of it (not
	// zombies) still ran a moment after the command and its producers were
	// done: wrap leaves them to the user (kill -- -GROUP).
	GroupLeft int `json:"group_still_running,omitempty"`
	// WithoutRunEnd counts producers that sent events and ended without
	// their run.end (killed with SIGKILL, cut off by --drain): what they
	// dropped or switched off is unknown, so no layer is "ok".
	WithoutRunEnd        uint64   `json:"producers_without_run_end,omitempty"`
	WithoutRunEndSources []string `json:"producers_without_run_end_sources,omitempty"` // at most 16
	Record               string   `json:"record,omitempty"`
	Recorded             uint64   `json:"recorded"`
	Log                  string   `json:"log,omitempty"`

	Layers []WrapLayer `json:"layers"`
	// ProducerNotes are the producers' run.end errors: instruments switched
	// off (a missing hook target, repeated errors) and evidence lost before
	// it became an event. A layer they name is "partial", never "ok".
	ProducerNotes []string `json:"producer_notes,omitempty"`
	// Config is the run's configuration as the verdict used it: --engine and
	// --config, merged with what each engine process reported from inside
	// (provenance "engine"; runconfig.EngineMerge).
	Config hook.RunConfig `json:"config"`
	// Contradictions are settings --config stated and the engine reported
	// otherwise (or two engine processes disagreed on), with the value used.
	Contradictions []runconfig.Contradiction `json:"contradictions,omitempty"`
	// SilentRanks are TP ranks that never reported although their role's
	// engine processes said how many ranks it runs: every layer is partial.
	SilentRanks []string `json:"silent_ranks,omitempty"`
}

// Layer verdicts.
const (
	layerOK          = "ok"
	layerFinding     = "finding"
	layerNotMeasured = "not measured"
	layerOneSide     = "one side only" // checksums of one PD side: nothing to compare here
	layerPartial     = "partial"       // ok so far, but a producer reported its instrument off or evidence lost
)

// WrapLayer is one layer's verdict.
type WrapLayer struct {
	Layer    string `json:"layer"`    // transfer | buffer | compute
	Analyzer string `json:"analyzer"` // analyzers.All name
	Status   string `json:"status"`   // ok | finding | not measured | one side only | partial
	Events   uint64 `json:"events"`   // events of the kind it judges
	Findings int    `json:"findings"` // error findings it emitted
	// Sampling says how much of the run a sampled layer (buffer, compute)
	// looked at; nil for a layer that judges everything it gets (transfer).
	Sampling *WrapSampling `json:"sampling,omitempty"`
	Detail   string        `json:"detail"`
	Summary  any           `json:"summary"` // the analyzer's own summary, for --json (the verdict reads it typed)
}

// WrapSampling is what a sampled layer looked at: Sampled of Of replays (every
// replay for the canary, graph replays for graph-vs-eager), at one in Every
// (the setting the producers were given; "" when unknown). OfKnown is false
// when no replay event told how many there were.
type WrapSampling struct {
	Sampled uint64 `json:"sampled"`
	Of      uint64 `json:"of"`
	OfKnown bool   `json:"of_known"`
	Every   string `json:"every,omitempty"`
}

// wrapSamplingIn is what wrapLayers needs beyond the summaries to say how
// much a sampled layer looked at.
type wrapSamplingIn struct {
	canaryEvery, graphdiffEvery string // "" when unknown
	graphdiffOff                bool   // --instruments (or the environment) left graphdiff out
	graphReplays                uint64 // replay events of mode graph
	sampledReplays              uint64 // graph replays that sent graph-vs-eager samples
}

// wrapLayerOf names the layer each analyzer judges and the event kind it reads.
var wrapLayerOf = map[string]struct {
	layer string
	kind  hook.Kind
}{
	checksum.AnalyzerName:  {"transfer", hook.KindRoomChecksum},
	canary.AnalyzerName:    {"buffer", hook.KindCanaryPages},
	graphdiff.AnalyzerName: {"compute", hook.KindGraphDiffSample},
}

// wrapTally counts, on the way to the bus, what the final report needs
// beyond the collector's counters: findings by analyzer and producer drops.
type wrapTally struct {
	next hook.Publisher

	mu              sync.Mutex
	findings        map[string]int
	producerDropped uint64
	producerNotes   []string // run.end errors, "proc pid N: …"
	// lost names, per analyzer ("" for every one), the producer notes
	// that say its evidence is incomplete.
	lost map[string][]string
	// graphReplays counts replay events of mode graph; sampledReplays the
	// graph replays graph-vs-eager sampled: a producer sends a step's
	// samples one after another, so a step counts once per producer
	// (lastSampled holds each producer's last sampled step, plus one).
	graphReplays, sampledReplays uint64
	lastSampled                  map[hook.Source]uint64
	// config is the run's configuration with the engine processes' own
	// reports merged in; contradictions what they contradicted; ranks
	// which TP ranks reported, against the TP size they reported.
	config         hook.RunConfig
	contradictions []runconfig.Contradiction
	engine         runconfig.EngineMerge
	ranks          *analyzers.CoverageCollector
}

// engineReport merges an engine process's run.start into the run's
// configuration (called with t.mu held).
func (t *wrapTally) engineReport(ev hook.Event) {
	if t.ranks == nil {
		t.ranks = analyzers.NewCoverageCollector()
	}
	t.ranks.Observe(ev)
	if b, ok := ev.Body.(*hook.RunStart); ok && b != nil && sessions.EngineReport(b.Config) {
		t.contradictions = append(t.contradictions, t.engine.Merge(&t.config, b.Config, ev.Src.Role, sessions.Reporter(ev.Src, b))...)
	}
}

func (t *wrapTally) Publish(ev hook.Event) {
	t.mu.Lock()
	if ev.Src.Role != "" || ev.Kind == hook.KindRunStart {
		t.engineReport(ev)
	}
	switch b := ev.Body.(type) {
	case *hook.Finding:
		if b != nil && b.Severity == hook.SevError {
			t.findings[b.Analyzer]++
		}
	case *hook.Replay:
		if b != nil && b.Mode == "graph" {
			t.graphReplays++
		}
	case *hook.GraphDiffSample:
		if b != nil {
			if t.lastSampled == nil {
				t.lastSampled = map[hook.Source]uint64{}
			}
			if t.lastSampled[ev.Src] != b.Step+1 {
				t.lastSampled[ev.Src] = b.Step + 1
				t.sampledReplays++
			}
		}
	case *hook.RunEnd:
		if b != nil {
			t.producerDropped += b.Dropped
			if b.Error != "" {
				who := fmt.Sprintf("%s pid %d: ", ev.Src.Proc, ev.Src.PID)
				if len(t.producerNotes) < 64 {
					t.producerNotes = append(t.producerNotes, who+b.Error)
				}
				if t.lost == nil {
					t.lost = map[string][]string{}
				}
				for _, n := range strings.Split(b.Error, "; ") {
					for _, a := range analyzers.NoteAnalyzers(n) {
						if len(t.lost[a]) < 8 {
							t.lost[a] = append(t.lost[a], who+n)
						}
					}
				}
			}
		}
	}
	t.mu.Unlock()
	t.next.Publish(ev)
}

func wrapRun(opts *WrapOptions) error {
	now := opts.Factory.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	if opts.Run == "" {
		opts.Run = "wrap-" + start.UTC().Format("20060102T150405Z")
	}
	if err := wrapSupported(); err != nil {
		return cmdutil.InputError(err)
	}
	if opts.Watch && !opts.IO.IsStdoutTTY() {
		return cmdutil.UsageError("wrap: --watch needs a terminal on stdout; without it wrap prints progress lines")
	}
	rc, err := wrapRunConfig(opts.Engine, opts.Config)
	if err != nil {
		return err
	}
	base := opts.environ
	if base == nil {
		base = os.Environ()
	}
	if err := wrapRefuseRemote(base); err != nil {
		return err
	}
	// Not found or not executable: say so before anything is created.
	if _, err := exec.LookPath(opts.Command[0]); err != nil {
		return cmdutil.InputError(fmt.Errorf("wrap: cannot start the command: %w", err))
	}
	extract := opts.extract
	if extract == nil {
		extract = pyhook.Extract
	}
	pyDir, err := extract(opts.CacheDir)
	if err != nil {
		return cmdutil.InputError(fmt.Errorf("wrap: %w", err))
	}
	src := &wrapSource{opts: opts, pyDir: pyDir, errOut: &lockedWriter{w: opts.IO.ErrOut}, finished: make(chan struct{})}
	c, sockDir, err := wrapCollector(opts.Run, rejectNotes(pipeline.NewStatusLine(src.errOut, false, now), "wrap"))
	if err != nil {
		return err
	}
	defer os.RemoveAll(sockDir)
	defer c.Close()
	src.c = c
	return wrapPipeline(opts, src, rc, start, now)
}

// wrapCollector listens on a private socket: in a 0700 directory from
// MkdirTemp, the socket itself 0600 (hook.Listen).
func wrapCollector(run string, onReject func(uint64, error)) (*hook.Collector, string, error) {
	sockDir, err := os.MkdirTemp("", "kvcanary-wrap-")
	if err == nil && len(sockDir) > 80 {
		// A Unix socket path holds at most 107 bytes: a long TMPDIR gives way to /tmp.
		os.Remove(sockDir)
		sockDir, err = os.MkdirTemp("/tmp", "kvcanary-wrap-")
	}
	if err != nil {
		return nil, "", cmdutil.InputError(fmt.Errorf("wrap: private socket directory: %w", err))
	}
	// A SIGKILLed wrap runs no deferred cleanup: its directory stays. Each
	// wrap names itself in its own and removes those whose wrap is gone.
	markWrapDir(sockDir)
	cleanStaleWrapDirs(filepath.Dir(sockDir))
	c, err := hook.Listen("unix://"+sockDir+"/collector.sock", hook.ListenOptions{Run: run, OnReject: onReject})
	if err != nil {
		os.RemoveAll(sockDir)
		return nil, "", cmdutil.InputError(fmt.Errorf("wrap: %w", err))
	}
	return c, sockDir, nil
}

// wrapPipeline runs the command through the pipeline: collector ->
// analyzers -> tally -> bus -> lossless bundle writer (and the dashboard's
// live view), then reports.
func wrapPipeline(opts *WrapOptions, src *wrapSource, rc hook.RunConfig, start time.Time, now func() time.Time) error {
	man := traces.Manifest{Tool: "kvcanary " + buildinfo.String(), Host: localHost(), Run: opts.Run, Command: "wrap", Config: rc,
		Labels: map[string]string{"command": strings.Join(opts.Command, " "), "pythonpath": src.pyDir}}
	for _, s := range opts.Settings {
		man.Labels[s.Env] = s.Value
	}
	as := analyzers.All(analyzers.Options{WarmupMaxSeqLen: checksum.DefaultWarmupMaxSeqLen})
	tally := &wrapTally{findings: map[string]int{}, config: rc, ranks: analyzers.NewCoverageCollector()}
	var uiStats tui.Stats
	po := pipeline.Options{Record: opts.Record, Manifest: man, Analyzers: as,
		Middleware: func(next hook.Publisher) hook.Publisher { tally.next = next; return tally }}
	if opts.Watch {
		po.View, po.ViewCapacity = wrapView(opts, src, as, man, &uiStats), tui.DefaultLiveCapacity
	}
	p, stopExport, err := opts.Export.newPipeline(factoryCtx(opts.Factory), src.errOut, exportSource{Run: opts.Run, Collector: src.c, Analyzers: as}, po, "wrap")
	if err != nil {
		return err
	}
	defer stopExport()
	// Settings not stated are unknown in it.
	p.Publish(hook.Event{Kind: hook.KindRunStart, TS: start.UnixNano(), Run: opts.Run,
		Src:  hook.Source{Proc: "kvcanary-wrap", PID: int32(os.Getpid())},
		Body: &hook.RunStart{Tool: man.Tool, Config: rc, Host: man.Host}})
	if err := src.start(p); err != nil {
		p.Close()
		return cmdutil.InputError(err)
	}
	defer src.closeLog()
	res := p.Run(factoryCtx(opts.Factory), src)
	st := src.c.Stats()
	tally.mu.Lock()
	sum := WrapSummary{
		Run: opts.Run, Command: opts.Command, PythonPath: src.pyDir, Settings: opts.Settings,
		ExitCode: src.info.code, Signal: src.info.signal, Forwarded: src.info.forwarded, DurationNS: int64(now().Sub(start)),
		Events: st.Events, ByKind: orEmpty(st.ByKind), Connections: st.Connections,
		Rejected: st.Rejected, RejectedBy: orEmpty(st.RejectedBy), DroppedProducer: tally.producerDropped,
		CutOff: src.info.cutOff, Record: opts.Record, Log: opts.Log,
		WithoutRunEnd: st.EndedWithoutRunEnd, WithoutRunEndSources: st.EndedWithoutRunEndSources,
		GroupLeft: src.info.groupLeft,
		Layers: wrapLayers(analyzers.SetOf(as...).Summaries(), st.ByKind, tally.findings, wrapSamplingIn{
			canaryEvery: wrapCanaryEvery(opts), graphdiffEvery: wrapSettingValue(opts, "KVCANARY_GRAPHDIFF_EVERY"),
			graphdiffOff: !wrapInstrumentOn(opts, "graphdiff"), graphReplays: tally.graphReplays, sampledReplays: tally.sampledReplays}),
		ProducerNotes: slices.Clone(tally.producerNotes),
		Config:        tally.config, Contradictions: slices.Clone(tally.contradictions), SilentRanks: tally.ranks.SilentRanks(),
	}
	markPartial(sum.Layers, tally.lost, sum.DroppedProducer > 0, sum.WithoutRunEnd, sum.SilentRanks)
	tally.mu.Unlock()
	return wrapReport(opts, sum, res, uiStats)
}

// wrapReport completes the summary with the recording's counts, prints it
// and gives the exit status: the command's own, else 3 when kvcanary failed.
func wrapReport(opts *WrapOptions, sum WrapSummary, res pipeline.Result, uiStats tui.Stats) error {
	if sum.Settings == nil {
		sum.Settings = []WrapSetting{}
	}
	if opts.Record != "" {
		sum.Recorded = res.Recorded
		// The bundle also holds wrap's run.start and the analyzers' findings.
		if want := sum.Events; want > sum.Recorded+res.RecordRejected {
			sum.DroppedRecorder = want - sum.Recorded - res.RecordRejected
		}
	}
	sum.Dropped = sum.DroppedRecorder + sum.DroppedProducer
	var outErr error
	if opts.JSON.JSON {
		outErr = cmdutil.WriteJSON(opts.IO.Out, sum)
	} else {
		if opts.Watch {
			writeWatchReport(opts.IO.ErrOut, uiStats, nil, "", sum.Rejected)
		}
		outErr = writeWrapSummary(opts.IO.ErrOut, sum)
	}
	var kvErr error
	switch {
	case res.ViewErr != nil:
		kvErr = fmt.Errorf("wrap: dashboard: %w", res.ViewErr)
	case res.SourceErr != nil:
		kvErr = fmt.Errorf("wrap: collector: %w", res.SourceErr)
	case res.RecordErr != nil:
		kvErr = fmt.Errorf("wrap: %w", res.RecordErr)
	case outErr != nil:
		kvErr = outErr
	}
	switch {
	case sum.ExitCode != 0:
		if kvErr != nil {
			fmt.Fprintln(opts.IO.ErrOut, "kvcanary:", kvErr)
		}
		return &cmdutil.ExitError{Code: sum.ExitCode}
	case kvErr != nil:
		return cmdutil.InputError(kvErr)
	}
	return nil
}

// wrapView is --watch's dashboard. Closing it does not stop the command:
// wrap then waits for it.
func wrapView(opts *WrapOptions, src *wrapSource, as []hook.Analyzer, man traces.Manifest, stats *tui.Stats) pipeline.View {
	run := opts.runTUI
	if run == nil {
		run = tui.Run
	}
	return func(ctx context.Context, sub *hook.Subscription, done <-chan error) error {
		status := func() string {
			st := src.c.Stats()
			return fmt.Sprintf("%d producers connected (%d connections so far), %d rejected", st.Open, st.Connections, st.Rejected)
		}
		var err error
		*stats, err = run(ctx, tui.Options{
			Title: "kvcanary wrap", Source: "wrap " + cmdutil.Quote(strings.Join(opts.Command, " ")), Run: opts.Run,
			Sub: sub, Summaries: analyzers.SetOf(as...).Summaries, Done: done, SourceStatus: status,
			SnapshotDir: "", // the user state dir (tui.DefaultSnapshotDir) Manifest: man, KeepRuns: true,
			In:          opts.IO.In, Out: opts.IO.Out, NoColor: os.Getenv("NO_COLOR") != "",
		})
		select {
		case <-src.finished:
		default:
			fmt.Fprintf(src.errOut, "wrap: dashboard closed; waiting for the command (pid %d) to exit — Ctrl-C stops it\n", src.child.Process.Pid)
		}
		return err
	}
}

// wrapExit is how the command ended, and what wrap did about it.
type wrapExit struct {
	code      int
	signal    string
	forwarded []string
	cutOff    int
	groupLeft int // the process group, when processes of it outlived the command
}

// wrapSource is the wrapped command and the collector its hooks report
// to. The command lives by signals, not by the pipeline's context: the
// source ends once it exited and its producers drained.
type wrapSource struct {
	opts   *WrapOptions
	pyDir  string
	errOut *lockedWriter
	c      *hook.Collector

	child     *exec.Cmd
	logFile   *os.File
	sigs      <-chan os.Signal
	stopSigs  func()
	stopServe context.CancelFunc
	serveDone chan error

	info     wrapExit
	finished chan struct{} // closed once info is final
}

// start opens the command's output, starts the collector (publishing into
// p) and the command, before the pipeline runs: its first lines precede the
// dashboard.
func (s *wrapSource) start(p *pipeline.Pipeline) error {
	opts := s.opts
	s.child = exec.Command(opts.Command[0], opts.Command[1:]...)
	base := opts.environ
	if base == nil {
		base = os.Environ()
	}
	s.child.Env = wrapEnv(base, s.pyDir, s.c.Addr(), opts.Run, opts.Settings)
	ownProcessGroup(s.child)
	s.child.WaitDelay = 2 * time.Second // a grandchild holding our output pipes open must not hang the exit
	if err := s.stdio(); err != nil {
		return err
	}
	s.sigs, s.stopSigs = opts.signals, func() {}
	if s.sigs == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, wrapSignals...)
		s.sigs, s.stopSigs = ch, func() { signal.Stop(ch) }
	}
	serveCtx, stopServe := context.WithCancel(context.Background())
	s.stopServe, s.serveDone = stopServe, make(chan error, 1)
	go func() { s.serveDone <- s.c.Serve(serveCtx, hook.PublishFunc(p.Publish)) }()
	if err := s.child.Start(); err != nil {
		s.stopSigs()
		stopServe()
		<-s.serveDone
		return fmt.Errorf("wrap: cannot start the command: %w", err)
	}
	if !opts.JSON.JSON {
		fmt.Fprintf(s.errOut, "wrap: started %s (pid %d, run %s); collector %s; package %s on PYTHONPATH%s\n",
			cmdutil.Quote(strings.Join(opts.Command, " ")), s.child.Process.Pid, cmdutil.Quote(opts.Run), s.c.Addr(), cmdutil.Quote(s.pyDir), recordNote(opts.Record))
		if opts.Watch {
			fmt.Fprintf(s.errOut, "wrap: the command's output goes to %s\n", cmdutil.Quote(opts.Log))
		}
	}
	if opts.started != nil {
		opts.started(s.child.Process.Pid)
	}
	return nil
}

// stdio points the command's output at --log (--watch), stderr (--json) or
// wrap's own streams.
func (s *wrapSource) stdio() error {
	opts := s.opts
	switch {
	case opts.Watch:
		if opts.Log == "" {
			opts.Log = opts.Run + ".log"
		}
		f, err := os.OpenFile(opts.Log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("wrap: command log: %w", err)
		}
		s.logFile = f
		s.child.Stdout, s.child.Stderr = f, f
	case opts.JSON.JSON:
		s.child.Stdin, s.child.Stdout, s.child.Stderr = childStdin(opts.IO.In), opts.IO.ErrOut, opts.IO.ErrOut
	default:
		s.child.Stdin, s.child.Stdout, s.child.Stderr = childStdin(opts.IO.In), opts.IO.Out, opts.IO.ErrOut
	}
	return nil
}

func (s *wrapSource) closeLog() {
	if s.logFile != nil {
		s.logFile.Close()
	}
}

// Rejected is the collector's count, for the bundle's footer.
func (s *wrapSource) Rejected() uint64 { return s.c.Stats().Rejected }

// Run supervises the started command: it waits for it, forwards signals,
// and once it exited lets the producers finish before the collector stops.
func (s *wrapSource) Run(context.Context, hook.Publisher) error {
	defer close(s.finished)
	defer s.stopSigs()
	s.supervise()
	quiet := s.opts.quiet
	if quiet <= 0 {
		quiet = 250 * time.Millisecond
	}
	s.info.cutOff = drainProducers(s.c, s.opts.Drain, quiet)
	// Nothing is printed here under --watch: the dashboard still owns the
	// terminal. The summary says it all once it closed.
	if open := s.info.cutOff; open > 0 && !s.opts.JSON.JSON && !s.opts.Watch {
		fmt.Fprintf(s.errOut, "wrap: %s still connected %s after the command exited; closing (what they send later is lost; --drain waits longer)\n",
			plural(int64(open), "producer"), s.opts.Drain)
	}
	// Checked after the drain, and again for a moment: an engine's
	// children take a while to follow their parent out (zombies waiting
	// for init to reap them do not count).
	if pgid := s.child.Process.Pid; groupLingers(pgid, time.Second) {
		s.info.groupLeft = pgid
	}
	s.stopServe()
	return <-s.serveDone
}

// supervise returns once the command exited, forwarding signals to its
// process group (the second kills it) and printing progress lines.
func (s *wrapSource) supervise() {
	opts := s.opts
	progress := !opts.Watch && !opts.JSON.JSON
	every := opts.progressEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	waited := make(chan error, 1)
	go func() { waited <- s.child.Wait() }()
	pgid := s.child.Process.Pid
	var last hook.Stats
	for {
		select {
		case sig := <-s.sigs:
			kill := len(s.info.forwarded) > 0
			name := signalGroup(pgid, sig, kill)
			s.info.forwarded = append(s.info.forwarded, name)
			if !opts.JSON.JSON {
				if kill {
					fmt.Fprintf(s.errOut, "wrap: killed the command's process group %d (%s)\n", pgid, name)
				} else {
					fmt.Fprintf(s.errOut, "wrap: forwarded %s to the command's process group %d; again to kill it\n", name, pgid)
				}
			}
		case <-ticker.C:
			if progress {
				st := s.c.Stats()
				if st.Events != last.Events || st.Open != last.Open || st.Connections != last.Connections || st.Rejected != last.Rejected {
					fmt.Fprintf(s.errOut, "wrap: %s\n", wrapProgressLine(st))
				}
				last = st
			}
		case err := <-waited:
			if err != nil && s.child.ProcessState == nil {
				fmt.Fprintf(s.errOut, "wrap: wait for the command: %s\n", cmdutil.Quote(err.Error()))
			}
			s.info.code, s.info.signal = exitStatus(s.child.ProcessState)
			return
		}
	}
}

// groupLingers reports whether processes of group pgid still run after
// waiting up to grace for them to go.
func groupLingers(pgid int, grace time.Duration) bool {
	deadline := time.Now().Add(grace)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return true
		}
		time.Sleep(25 * time.Millisecond)
	}
	return false
}

// childStdin is what the command reads: wrap's stdin, except a terminal —
// outside the terminal's foreground process group the command would be
// stopped (SIGTTIN) the moment it read it — which gives way to /dev/null.
func childStdin(in io.Reader) io.Reader {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return in
}

// drainProducers waits, at most max, until no producer is connected and no
// new connection arrived for quiet (a producer's last connection may still
// sit in the listen queue when the command exits). It returns how many
// producers are still connected.
func drainProducers(c *hook.Collector, max, quiet time.Duration) int {
	deadline := time.Now().Add(max)
	st := c.Stats()
	conns, since := st.Connections, time.Now()
	for time.Now().Before(deadline) {
		st = c.Stats()
		if st.Connections != conns || st.Open > 0 {
			conns, since = st.Connections, time.Now()
		} else if time.Since(since) >= quiet {
			return 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c.Stats().Open
}

// wrapProgressLine is one progress line while the command runs: events by
// kind and producers connected now.
func wrapProgressLine(st hook.Stats) string {
	return fmt.Sprintf("%s; %s connected (%s so far); %d rejected",
		wrapEventKinds(st), plural(int64(st.Open), "producer"), plural(int64(st.Connections), "connection"), st.Rejected)
}

// wrapEventsLine is the summary's count once every producer is gone:
// events by kind and the connections they came over.
func wrapEventsLine(st hook.Stats) string {
	return fmt.Sprintf("%s from %s; %d rejected", wrapEventKinds(st), plural(int64(st.Connections), "producer connection"), st.Rejected)
}

// wrapEventKinds is "143 events (run.end 3, room.checksum 40, …)".
func wrapEventKinds(st hook.Stats) string {
	var parts []string
	for _, k := range hook.Kinds() {
		if n := st.ByKind[k.String()]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	kinds := ""
	if len(parts) > 0 {
		kinds = " (" + strings.Join(parts, ", ") + ")"
	}
	return plural(int64(st.Events), "event") + kinds
}

// wrapCanaryEvery is the KVCANARY_CANARY_EVERY the command ran with: the
// flag's, else the environment's, else the package default.
func wrapCanaryEvery(opts *WrapOptions) string {
	return wrapSettingValue(opts, "KVCANARY_CANARY_EVERY")
}

// wrapSettingValue is the value of one of wrapSettingFlags' settings (env
// names it) the command ran with: the flag's, else the environment's, else
// the package default; "" when the environment's value is one the flag
// would refuse (the package decides what it makes of it).
func wrapSettingValue(opts *WrapOptions, env string) string {
	for _, st := range opts.Settings {
		if st.Env == env {
			return st.Value
		}
	}
	var def string
	var check func(string) error
	for _, f := range wrapSettingFlags {
		if f.env == env {
			def, check = f.def, f.check
		}
	}
	base := opts.environ
	if base == nil {
		base = os.Environ()
	}
	for i := len(base) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(base[i], env+"="); ok {
			if check != nil && check(v) != nil {
				return ""
			}
			return v
		}
	}
	return def
}

// wrapInstrumentOn reports whether the command ran with instrument name
// among KVCANARY_INSTRUMENTS (true when that setting is unknown).
func wrapInstrumentOn(opts *WrapOptions, name string) bool {
	v := wrapSettingValue(opts, "KVCANARY_INSTRUMENTS")
	if v == "" {
		return true
	}
	for _, f := range strings.Split(v, ",") {
		if strings.TrimSpace(f) == name {
			return true
		}
	}
	return false
}

// wrapLayers gives each analyzer's verdict: transfer, buffer, compute. An
// analyzer the command did not run has no layer. The sampled layers say how
// much of the run they looked at, also when it was nothing.
func wrapLayers(sums analyzers.Summaries, byKind map[string]uint64, findings map[string]int, in wrapSamplingIn) []WrapLayer {
	out := make([]WrapLayer, 0, 3)
	layer := func(name string, summary any, sampling *WrapSampling, verdict func(l *WrapLayer)) {
		info := wrapLayerOf[name]
		l := WrapLayer{Layer: info.layer, Analyzer: name, Events: byKind[info.kind.String()], Findings: findings[name], Summary: summary, Sampling: sampling}
		if l.Events == 0 {
			l.Status, l.Detail = layerNotMeasured, "no "+info.kind.String()+" events"
			if sampling != nil {
				l.Detail = notSampledDetail(name, *sampling, in.graphdiffOff)
			}
		} else {
			l.Status = layerOK
			if l.Findings > 0 {
				l.Status = layerFinding
			}
			verdict(&l)
			if l.Findings > 0 {
				l.Detail += fmt.Sprintf("; %s", plural(int64(l.Findings), "finding"))
			}
		}
		out = append(out, l)
	}
	replays, replaysKnown := byKind[hook.KindReplay.String()], byKind[hook.KindReplay.String()] > 0
	if s := sums.Checksum; s != nil {
		layer(checksum.AnalyzerName, *s, nil, func(l *WrapLayer) { checksumLayer(l, s) })
	}
	if s := sums.Canary; s != nil {
		sp := &WrapSampling{Sampled: uint64(s.Replays), Of: replays, OfKnown: replaysKnown, Every: in.canaryEvery}
		layer(canary.AnalyzerName, *s, sp, func(l *WrapLayer) { canaryLayer(l, s, *sp) })
	}
	if s := sums.Graphdiff; s != nil {
		sp := &WrapSampling{Sampled: in.sampledReplays, Of: in.graphReplays, OfKnown: replaysKnown, Every: in.graphdiffEvery}
		layer(graphdiff.AnalyzerName, *s, sp, func(l *WrapLayer) { graphdiffLayer(l, s, *sp) })
	}
	return out
}

// wrapEveryFlag is the wrap flag that sets each sampled layer's rate.
var wrapEveryFlag = map[string]string{canary.AnalyzerName: "--canary-every", graphdiff.AnalyzerName: "--graphdiff-every"}

// sampledOf says how much a sampled layer looked at: "2 of 102 replays
// checked (1 in 64)", "0 of 12 graph replays sampled (1 in 256)".
func sampledOf(sp WrapSampling, what, verb string) string {
	s := fmt.Sprintf("%d of %s %s", sp.Sampled, plural(int64(sp.Of), what), verb)
	if !sp.OfKnown {
		s = plural(int64(sp.Sampled), what) + " " + verb + ", of an unknown number (no replay events)"
	}
	if sp.Every != "" {
		s += " (1 in " + sp.Every + ")"
	}
	return s
}

// notSampledDetail explains a sampled layer that got no events: how much
// there was to sample, and the flag that samples a short run.
func notSampledDetail(analyzer string, sp WrapSampling, graphdiffOff bool) string {
	if analyzer == graphdiff.AnalyzerName && graphdiffOff {
		return "graph-vs-eager was off (--instruments without graphdiff)"
	}
	what, verb := "replay", "checked"
	if analyzer == graphdiff.AnalyzerName {
		what, verb = "graph replay", "sampled"
	}
	d := sampledOf(sp, what, verb)
	switch {
	case sp.OfKnown && sp.Of == 0 && analyzer == graphdiff.AnalyzerName:
		d += ": every replay ran eagerly, and graph-vs-eager compares captured graphs"
	case sp.Of > 0 && sp.Every != "1":
		d += fmt.Sprintf(": a run this short needs a denser rate, e.g. %s 1", wrapEveryFlag[analyzer])
	}
	return d
}

// markPartial turns an "ok" layer into "partial" when what was judged is
// clean but not everything was judged: a producer's run.end named its
// analyzer's evidence incomplete (lost, by noteAnalyzers; "" for every
// analyzer), producers dropped events or device work (dropped), or
// producers ended without a run.end (withoutEnd: killed or cut off — what
// they lost is unknown), or TP ranks never reported (silent: what they saw
// is unknown).
func markPartial(layers []WrapLayer, lost map[string][]string, dropped bool, withoutEnd uint64, silent []string) {
	for i := range layers {
		l := &layers[i]
		if l.Status != layerOK && l.Status != layerPartial {
			continue
		}
		var why []string
		if notes := append(slices.Clone(lost[l.Analyzer]), lost[""]...); len(notes) > 0 {
			why = append(why, "a producer reported: "+strings.Join(notes, "; "))
		}
		if dropped {
			why = append(why, "producers lost evidence (see dropped and producer lines)")
		}
		if withoutEnd > 0 {
			why = append(why, fmt.Sprintf("%s without run.end (killed? cut off?): what they dropped or disabled is unknown",
				pluralVerb(withoutEnd, "producer ended", "producers ended")))
		}
		if len(silent) > 0 {
			why = append(why, strings.Join(silent, ", ")+": what it saw is unknown")
		}
		if len(why) > 0 {
			l.Status = layerPartial
			l.Detail += "; " + strings.Join(why, "; ")
		}
	}
}

// wrapEngineLine lists the run's known engine settings with where each came
// from: "cuda_graph=true (engine), multi_stream_overlap=false (label)".
func wrapEngineLine(rc hook.RunConfig) string {
	var parts []string
	for _, st := range runconfig.KnownSettings(rc) {
		p := "source not recorded"
		if v := rc.Provenance[st.Name]; v != "" {
			p = v
		}
		parts = append(parts, fmt.Sprintf("%s=%v (%s)", st.Name, cmdutil.Quote(fmt.Sprint(st.Value)), p))
	}
	return strings.Join(parts, ", ")
}

func pluralVerb(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// checksumLayer sets the transfer layer's detail, and its status when a
// room mismatched or only one side was seen.
func checksumLayer(l *WrapLayer, s *checksum.Summary) {
	switch {
	case s.Mismatched > 0:
		l.Status = layerFinding
	case s.Matched == 0 && l.Status == layerOK:
		l.Status = layerOneSide
	case s.Missing > 0 && l.Status == layerOK:
		l.Status = layerPartial // the rooms seen on one side were not checked
	}
	l.Detail = fmt.Sprintf("%s: %d matched, %d mismatched, %d one side only, %d warmup",
		plural(int64(s.Rooms), "room"), s.Matched, s.Mismatched, s.Missing, s.Warmup)
	switch {
	case l.Status == layerOneSide:
		l.Detail += `; compare with the other side's bundle: kvcanary checksum compare PREFILL DECODE`
	case s.Missing > 0:
		l.Detail += fmt.Sprintf("; %d of %d rooms unchecked: seen on one side only", s.Missing, s.Rooms)
	}
}

// canaryLayer sets the buffer layer's detail, and its status when the
// canary found something. sp counts replay events (every graph replay, on
// every rank); the canary checks one replay in sp.Every.
func canaryLayer(l *WrapLayer, s *canary.Summary, sp WrapSampling) {
	if s.Findings() {
		l.Status = layerFinding
	}
	l.Detail = fmt.Sprintf("%s (policy %s): %d live-page overwrites, %d missing stores, %d benign transfer writes",
		sampledOf(sp, "replay", "checked"), cmdutil.Quote(s.Policy), s.LivePageOverwrites, s.MissingStores, s.BenignTransferWrites)
	if b := s.Between; b != nil {
		l.Detail += fmt.Sprintf("; between replays (%s): %d live-page overwrites, %d missing stores",
			plural(int64(s.BetweenChecks), "check"), b.LivePageOverwrites, b.MissingStores)
	} else {
		l.Detail += "; between replays: not checked"
	}
}

// graphdiffLayer sets the compute layer's detail, and its status when a
// sample diverged. sp counts graph replays (on every rank) and those sampled.
func graphdiffLayer(l *WrapLayer, s *graphdiff.Summary, sp WrapSampling) {
	if s.Divergent > 0 {
		l.Status = layerFinding
	}
	l.Detail = fmt.Sprintf("%s: %s, %d divergent", sampledOf(sp, "graph replay", "sampled"), plural(int64(s.Samples), "sample"), s.Divergent)
	if s.MinTopKJaccard != nil {
		l.Detail += fmt.Sprintf(", min top-k Jaccard %.3f", *s.MinTopKJaccard)
	}
}

// writeWrapSummary prints the exit report to stderr (stdout is the
// command's, or --json's).
func writeWrapSummary(w io.Writer, s WrapSummary) error {
	var b strings.Builder
	end := fmt.Sprintf("exited with status %d", s.ExitCode)
	if s.Signal != "" {
		end = fmt.Sprintf("was killed by %s (exit %d)", s.Signal, s.ExitCode)
	}
	fmt.Fprintf(&b, "wrap: the command %s after %s\n", end, time.Duration(s.DurationNS).Round(time.Millisecond))
	if g := s.GroupLeft; g != 0 {
		fmt.Fprintf(&b, "wrap: the command exited; processes of its group %d still run (kill -- -%d stops them)\n", g, g)
	}
	fmt.Fprintf(&b, "wrap: %s\n", wrapEventsLine(hook.Stats{Events: s.Events, ByKind: s.ByKind, Connections: s.Connections, Rejected: s.Rejected}))
	fmt.Fprintf(&b, "wrap: dropped %d (recorder %d, reported by producers %d)", s.Dropped, s.DroppedRecorder, s.DroppedProducer)
	if s.CutOff > 0 {
		fmt.Fprintf(&b, "; %s cut off by --drain, what they sent later is not counted", plural(int64(s.CutOff), "producer"))
	}
	b.WriteString("\n")
	if s.WithoutRunEnd > 0 {
		fmt.Fprintf(&b, "wrap: %s without run.end (killed? cut off?): what they dropped or disabled is unknown: %s\n",
			pluralVerb(s.WithoutRunEnd, "producer ended", "producers ended"), strings.Join(s.WithoutRunEndSources, ", "))
	}
	for _, n := range s.ProducerNotes {
		fmt.Fprintf(&b, "wrap: producer %s\n", cmdutil.Quote(n))
	}
	if s.Record != "" {
		fmt.Fprintf(&b, "wrap: recorded %d events to %s\n", s.Recorded, cmdutil.Quote(s.Record))
	}
	if line := wrapEngineLine(s.Config); line != "" {
		fmt.Fprintf(&b, "wrap: engine settings: %s\n", line)
	}
	for _, c := range s.Contradictions {
		fmt.Fprintf(&b, "wrap: CONTRADICTION: %s\n", cmdutil.Quote(c.String()))
	}
	for _, r := range s.SilentRanks {
		fmt.Fprintf(&b, "wrap: %s (no event from it: did it load kvcanary's hooks?)\n", r)
	}
	width, swidth := 0, 0
	for _, l := range s.Layers {
		width = max(width, len(l.Layer)+len(l.Analyzer)+3)
		swidth = max(swidth, len(l.Status))
	}
	for _, l := range s.Layers {
		name := l.Layer
		if l.Analyzer != l.Layer {
			name += " (" + l.Analyzer + ")"
		}
		fmt.Fprintf(&b, "%-*s  %-*s  %s\n", width, name, swidth, l.Status, l.Detail)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
