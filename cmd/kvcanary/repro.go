package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/logscan"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/spec/runconfig"
	"github.com/kvcanary/kvcanary/traces"
	"github.com/kvcanary/kvcanary/tui"
)

// ReproOptions are the inputs of `kvcanary repro`.
type ReproOptions struct {
	IO      *cmdutil.IOStreams
	Factory *cmdutil.Factory
	JSON    *cmdutil.JSONFlags

	URL         string
	Model       string
	Sessions    int
	Rounds      int
	Concurrency int
	Timeout     time.Duration
	Stream      bool
	Seed        uint64
	MaxTokens   int
	MaxResponse int // bytes read of one response at most
	ToolTime    repro.ToolTime
	Markers     []string
	Record      string
	ServerLog   string
	Redact      bool     // reply and server text as lengths and digests, in the bundle, the stream and the report
	Emit        string   // collector address the events also stream to
	Watch       bool     // show the run live in the dashboard
	Labels      []string // --label KEY=VALUE: engine settings stated by the user
	TZ          string   // zone of the server log's timestamps

	// Preflight and real workloads.
	NoPreflight   bool
	APIKey        string // --api-key, else OPENAI_API_KEY; never printed or recorded
	apiKeyFromEnv bool   // APIKey came from OPENAI_API_KEY (said on stderr: it is sent to --url)
	Headers       http.Header
	Sampling      repro.Sampling
	Conversations string // --conversations FILE.jsonl
	Run           string // run id on the bundle and every event

	sessionsSet        bool // --sessions was given (else --conversations sets it)
	concurrencyDefault bool // --concurrency was not given (it follows --sessions)

	// runTUI shows the dashboard (tests replace it); default tui.Run.
	runTUI func(context.Context, tui.Options) (tui.Stats, error)
}

// reproLong is the long help of `kvcanary repro`.
const reproLong = `Drive N multi-turn tool-calling sessions at an OpenAI-compatible server
(SGLang, vLLM, or the twin's "kvcanary sim serve"), at most --concurrency at
once. Every round offers tools; tool calls get deterministic results; a session
ends when the model answers in plain text (done) or the rounds run out
(maxrounds). Each session's first message says how many rounds must call a
tool ("tool rounds: N").

Between rounds a session runs its tools for --tool-time (default 1.5s-6s,
drawn per session and round from --seed), as agentic clients do: the
sessions drift apart, and the server sees the batch sizes of a real
workload instead of N sessions in lock-step. "--tool-time 0" answers at
once. Against "kvcanary sim serve" (an engine step paced to 25 ms) the
default is the 60–240 steps of sim run's think time. A session holds its
--concurrency slot while its tools run: with fewer slots than sessions, the
run takes about rounds × 3.75 s × sessions/concurrency longer.

Sessions are classified:
  leak      tool-call markup in content or reasoning_content (DSML, <tool_call>,
            <|tool_call, <｜tool▁calls▁begin｜>, <function_calls>; see --leak-marker)
  no_tool   a round that had to call a tool ended without a well-formed call
  error     transport failure, non-200 status, HTML or invalid JSON, a cut stream
  timeout   a request ran past --timeout
leak, no_tool and error are corruption. Finish reasons and n-gram loops are
recorded as extra signals. A server that goes away is not a corrupted one:
when a session fails and GET /v1/models then gets no answer either (three
tries, 0.5 s apart; a proxy's 502, 503 or 504 is no answer), repro stops,
says SERVER LOST, does not count the sessions the death cut short, and
exits 3. A throttled request (HTTP 429, or 503 with Retry-After) is no
answer either: it is sent again after Retry-After, up to 5 times, and a
session still throttled then is not counted (a note says how many).

Engine settings: at start repro asks the server for its settings (SGLang's
GET /get_server_info, then /server_info; vLLM's /version reports none) and
records what it reports, with provenance "server", in the run's
configuration; "kvcanary ab" then names a flag that changed between two
runs. --label KEY=VALUE states a setting the server does not report
(cuda_graph=on, multi_stream_overlap=off, index_k_dtype=fp8,
cuda_graph_max_bs=N, disaggregation=pd, other keys kept as given); a
setting neither reported nor labelled is recorded as unknown, never as off.

With --server-log, the server's log is tailed during the run and its batch
and retraction lines are recorded as sched events, so kvcanary ab sees the
scheduler pressure of both runs. Its timestamps are read in --tz (default:
this machine's local time, as SGLang logs it).

A corrupted session keeps its evidence: the round that went wrong, the
request ids, and the reply that ended it (at most 2 KiB, the cut marked).
--redact replaces that text, and any server message in a reason, by its
length and SHA-256 ("redacted: 1834 bytes, sha256 ab12…") in the bundle, the
--emit stream and the report, for bundles that must leave the building; the
outcome classes, rounds and request ids stay.

--emit ADDR streams the run's events live to a collector ("kvcanary watch
--listen ADDR" shows them as they come; "kvcanary collect"), as the engine
hooks do; events a slow or absent collector misses are counted at exit.
--watch shows the run in the dashboard as it goes (the sessions panel, its
table on enter, a finding per corrupted session); the report follows when
you quit it. q before the run ends stops the run.

Preflight: before the first session, repro checks that the server can be
measured: GET /v1/models answers, the model (--model, or the first listed)
is served, and one probe request offering one tool comes back with a
structured tool call (tool_calls, not markup or JSON in content, not prose).
A failure stops with exit 3 and a hint naming the likely cause:
  unreachable     connection refused, DNS, no answer: check --url
  auth            401/403: --api-key (or OPENAI_API_KEY), --header
  model_missing   the model is not served: --model
  no_tool_parser  the tool call came back as text: SGLang --tool-call-parser,
                  vLLM --enable-auto-tool-choice --tool-call-parser
  ignores_tools   the model answered in prose (the model or its chat template)
--no-preflight skips it. The probes carry the header "X-Kvcanary-Probe:
preflight": a server that counts sessions (sim serve) leaves them out.

Reading the result: a run in which every session ended in error or timeout
measured the server's failure, not corruption: it says so instead of a
CORRUPTION line and exits 3. A run with no_tool in at least 25% of its
sessions says that a control run (the same workload with CUDA graphs
disabled, say) must be compared with kvcanary ab before the rate is read
as corruption. Otherwise repro reports and exits 0 whatever it measured.
Sessions that ended in a server failure (HTTP 5xx, or no answer) count as
error in the rate, whose definition does not change with the cause (ab
compares like with like); a SERVER ERRORS line beside the headline says how
many, and gives the silent rate (leak, no_tool) alone.

Real workloads: --api-key (default $OPENAI_API_KEY) is sent as a bearer
token and --header NAME:VALUE as given; neither value is printed or
recorded (the bundle records header names and that a key was set).
--temperature, --top-p, --max-tokens and --sampling-seed (sent as "seed";
--seed picks the synthetic tasks) go with every request and are recorded
in the run configuration as workload.* extras, which ab reads as workload
confounds. --conversations FILE.jsonl replays your own tool-calling sessions
instead of the synthetic tasks, one JSON object per line:
  {"id": "refund-1",                       optional name (default cNNN)
   "messages": [{"role":"system",…}, {"role":"user",…}],   required
   "tools": [{"type":"function","function":{"name":"lookup",…}}],
                                           optional (default: repro's own)
   "tool_rounds": 2,    rounds that must call a tool (default: the length
                        of expect_tools, else 1; 0: none must)
   "rounds": 4,         most rounds (default --rounds)
   "expect_tools": ["lookup", "refund"]}   optional: the tool each round must call
The last message is a user or tool message. Tool calls are answered with
repro's deterministic tool results and sessions get the same outcome classes
(a round missing its expected tool is no_tool). OpenAI request fields
(model, temperature, stream, tool_choice, …) on a line are ignored; other
fields, bad JSON and bad messages are errors naming FILE:LINE. Session i
replays line i mod the number of lines; --sessions defaults to one session
per line.`

// reproExample holds the examples of `kvcanary repro`.
const reproExample = `  kvcanary repro --url http://127.0.0.1:30000 --sessions 80 --rounds 4
  kvcanary repro --url http://gpu-box:8000/v1 --model deepseek --record base.kvtrace --server-log sglang.log
  kvcanary repro --url http://127.0.0.1:30000 --stream --json | jq .corruption_rate
  kvcanary repro --url http://127.0.0.1:30000 --record out.kvtrace --redact --emit unix:///tmp/kvcanary.sock
  OPENAI_API_KEY=sk-… kvcanary repro --url https://llm.internal/v1 --header 'X-Team: infra' --temperature 0.6 --top-p 0.95
  kvcanary repro --url http://127.0.0.1:30000 --conversations agent-sessions.jsonl --sessions 200 --run base-graphs-on --record base.kvtrace`

// NewCmdRepro builds `kvcanary repro`.
func NewCmdRepro(f *cmdutil.Factory, runF func(*ReproOptions) error) *cobra.Command {
	opts := &ReproOptions{IO: f.IO, Factory: f, ToolTime: repro.DefaultToolTime}
	var headers []string
	var sampling samplingFlags
	cmd := &cobra.Command{
		Use:     "repro --url URL",
		Short:   "Drive concurrent tool-calling sessions at a server and measure the corruption rate",
		Long:    reproLong,
		Example: reproExample,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.check(cmd.Flags(), headers, sampling); err != nil {
				return err
			}
			return runOr(opts, runF, reproRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.URL, "url", "", "server URL (http://host:port, …/v1 or …/v1/chat/completions)")
	fl.StringVar(&opts.Model, "model", "", "model name (default: the first of GET /v1/models)")
	fl.IntVar(&opts.Sessions, "sessions", 80, "sessions to run")
	fl.IntVar(&opts.Rounds, "rounds", 4, "most rounds per session")
	fl.IntVar(&opts.Concurrency, "concurrency", 0, "sessions in flight at once (default: --sessions)")
	fl.DurationVar(&opts.Timeout, "timeout", 120*time.Second, "per-request timeout")
	fl.BoolVar(&opts.Stream, "stream", false, "request server-sent events (stream: true)")
	fl.Uint64Var(&opts.Seed, "seed", 1, "seed of the tasks and of each session's tool rounds")
	fl.IntVar(&opts.MaxTokens, "max-tokens", 0, "max_tokens per request (0: not sent)")
	fl.IntVar(&opts.MaxResponse, "max-response-bytes", repro.DefaultMaxResponseBytes, "bytes read of one response (JSON body or event stream) at most; a larger one ends its session as error, bounding memory per session")
	fl.Var(&toolTimeValue{&opts.ToolTime}, "tool-time", "client-side tool execution time per round: MIN-MAX or one duration (0: answer at once)")
	fl.StringArrayVar(&opts.Markers, "leak-marker", nil, "tool-call markup that makes a leak (repeatable; replaces the defaults)")
	fl.StringVar(&opts.Record, "record", "", "record the run to this trace bundle")
	fl.StringVar(&opts.ServerLog, "server-log", "", "tail this server log during the run and record its sched events")
	fl.BoolVar(&opts.Redact, "redact", false, "keep reply and server text only as lengths and SHA-256 digests (bundle, --emit stream, report)")
	fl.StringVar(&opts.Emit, "emit", "", "also stream events live to a collector at ADDR (unix:///path.sock or tcp://HOST:PORT)")
	fl.BoolVar(&opts.Watch, "watch", false, "show the run live in the dashboard (needs a terminal); the report follows when you quit it")
	fl.StringArrayVar(&opts.Labels, "label", nil, "state an engine setting the server does not report, `KEY=VALUE` (cuda_graph=on, multi_stream_overlap=off, …); repeatable")
	fl.StringVar(&opts.TZ, "tz", "Local", "time `ZONE` of --server-log's timestamps: an IANA name, UTC, Local, or an offset (+02:00)")
	fl.BoolVar(&opts.NoPreflight, "no-preflight", false, "skip the preflight (models, a probe request with a tool) before the first session")
	fl.StringVar(&opts.APIKey, "api-key", "", "API key sent as \"Authorization: Bearer KEY\" (default $OPENAI_API_KEY); never printed or recorded")
	fl.StringArrayVar(&headers, "header", nil, "extra request header `NAME:VALUE` (repeatable); values are never recorded")
	fl.Float64Var(&sampling.temperature, "temperature", 0, "sampling temperature sent with every request (default: not sent)")
	fl.Float64Var(&sampling.topP, "top-p", 0, "top_p sent with every request (default: not sent)")
	fl.Int64Var(&sampling.seed, "sampling-seed", 0, "the server's sampling seed, sent as \"seed\" (default: not sent; --seed picks the tasks)")
	fl.StringVar(&opts.Conversations, "conversations", "", "replay your own sessions from this JSON Lines `FILE` (format above) instead of the synthetic tasks")
	fl.StringVar(&opts.Run, "run", "", "run `ID` recorded on the bundle and every event (default repro-seed<seed>)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

// check validates the flags and settles what depends on several of them
// (the default concurrency, the workload flags); a usage error otherwise.
func (o *ReproOptions) check(fl *pflag.FlagSet, headers []string, sampling samplingFlags) error {
	switch {
	case o.URL == "":
		return cmdutil.UsageError("--url is required")
	case o.Sessions < 1, o.Rounds < 1:
		return cmdutil.UsageError("--sessions and --rounds must be at least 1")
	case o.Concurrency < 0:
		return cmdutil.UsageError("--concurrency %d: want at least 1", o.Concurrency)
	case o.Timeout <= 0:
		return cmdutil.UsageError("--timeout %v: want a positive duration", o.Timeout)
	case o.MaxTokens < 0:
		return cmdutil.UsageError("--max-tokens %d: want a positive count (0: not sent)", o.MaxTokens)
	case o.MaxResponse < 1024:
		return cmdutil.UsageError("--max-response-bytes %d: want at least 1024", o.MaxResponse)
	}
	if _, err := repro.ChatEndpoint(o.URL); err != nil {
		return cmdutil.UsageError("--url: %w", err)
	}
	if err := repro.ParseLabels(&hook.RunConfig{}, "--label", o.Labels); err != nil {
		return cmdutil.UsageError("%w", err)
	}
	if _, err := logscan.ParseZone(o.TZ); err != nil {
		return cmdutil.UsageError("--tz: %w", err)
	}
	if err := o.parseWorkloadFlags(fl, headers, sampling); err != nil {
		return err
	}
	o.sessionsSet = fl.Changed("sessions")
	o.concurrencyDefault = o.Concurrency == 0
	if o.Concurrency == 0 {
		o.Concurrency = o.Sessions
	}
	if o.Watch && !o.IO.IsStdoutTTY() {
		return cmdutil.UsageError("--watch: stdout is not a terminal; use --emit ADDR with kvcanary watch --listen ADDR elsewhere")
	}
	return nil
}

// reproSettings are the engine settings of the run: --label's, then what
// the server reports about itself (which wins over a label, with a note).
// A server that reports nothing leaves them unknown, with a note; it never
// stops the run.
func reproSettings(opts *ReproOptions, client *http.Client) hook.RunConfig {
	var rc hook.RunConfig
	_ = repro.ParseLabels(&rc, "--label", opts.Labels) // checked with the flags
	ctx := factoryCtx(opts.Factory)
	info, err := repro.FetchServerInfo(ctx, client, opts.URL, min(opts.Timeout, 5*time.Second))
	switch {
	case err != nil:
		fmt.Fprintf(opts.IO.ErrOut, "repro: the server did not report its settings (%s); settings not given with --label are recorded as unknown\n",
			cmdutil.Quote(err.Error()))
	default:
		for _, n := range repro.ApplyServerInfo(&rc, info) {
			fmt.Fprintf(opts.IO.ErrOut, "repro: %s\n", cmdutil.Quote(n))
		}
		if unknown := runconfig.UnknownSettings(rc); len(unknown) > 0 {
			fmt.Fprintf(opts.IO.ErrOut, "repro: settings from %s; unknown: %s (state them with --label KEY=VALUE)\n", info.Endpoint, strings.Join(unknown, ", "))
		} else {
			fmt.Fprintf(opts.IO.ErrOut, "repro: settings from %s\n", info.Endpoint)
		}
	}
	if rc.Provenance == nil {
		rc.Provenance = map[string]string{} // asked: what is absent is unknown, not guessed
	}
	return rc
}

// reproConfig is the run's configuration: the workload from the flags and
// the harness (sampling, headers, conversations: workload.* extras), the
// engine settings from reproSettings.
func reproConfig(opts *ReproOptions, ho *repro.HarnessOptions, settings hook.RunConfig) hook.RunConfig {
	rc := hook.RunConfig{Engine: "remote", URL: opts.URL, Model: opts.Model, Sessions: opts.Sessions, Rounds: opts.Rounds,
		Concurrency: opts.Concurrency, Seed: opts.Seed, ToolTime: opts.ToolTime.String(), Extra: ho.WorkloadExtra()}
	repro.MergeSettings(&rc, settings)
	return rc
}

// samplingFlags hold --temperature, --top-p and --sampling-seed until
// parseWorkloadFlags knows which were given.
type samplingFlags struct {
	temperature, topP float64
	seed              int64
}

// parseWorkloadFlags settles the API key (flag, else OPENAI_API_KEY), the
// headers and the sampling settings that were given.
func (o *ReproOptions) parseWorkloadFlags(fl *pflag.FlagSet, headers []string, s samplingFlags) error {
	if !fl.Changed("api-key") {
		o.APIKey = os.Getenv("OPENAI_API_KEY")
		o.apiKeyFromEnv = o.APIKey != ""
	} else if strings.TrimSpace(o.APIKey) == "" {
		return cmdutil.UsageError("--api-key: empty key")
	}
	for k, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") || strings.ContainsAny(value, "\r\n") {
			// Named by position: a malformed header may be a bare secret.
			return cmdutil.UsageError("--header number %d: want NAME:VALUE (one header, no line breaks)", k+1)
		}
		if o.Headers == nil {
			o.Headers = http.Header{}
		}
		o.Headers.Add(name, value)
	}
	if o.Headers.Get("Authorization") != "" && o.APIKey != "" {
		src := "--api-key"
		if !fl.Changed("api-key") {
			src = "OPENAI_API_KEY"
		}
		return cmdutil.UsageError("--header Authorization and %s both set the Authorization header; give one", src)
	}
	if fl.Changed("temperature") {
		t := s.temperature
		o.Sampling.Temperature = &t
	}
	if fl.Changed("top-p") {
		p := s.topP
		o.Sampling.TopP = &p
	}
	if fl.Changed("sampling-seed") {
		v := s.seed
		o.Sampling.Seed = &v
	}
	if t := o.Sampling.Temperature; t != nil && !(*t >= 0 && *t <= 2) {
		return cmdutil.UsageError("--temperature %v: want 0 to 2", *t)
	}
	if p := o.Sampling.TopP; p != nil && !(*p > 0 && *p <= 1) {
		return cmdutil.UsageError("--top-p %v: want above 0, at most 1", *p)
	}
	return nil
}

// toolTimeValue is the --tool-time flag.
type toolTimeValue struct{ t *repro.ToolTime }

func (v *toolTimeValue) String() string {
	if v.t == nil {
		return ""
	}
	return v.t.String()
}

func (v *toolTimeValue) Set(s string) error {
	t, err := repro.ParseToolTime(s)
	if err != nil {
		return err
	}
	*v.t = t
	return nil
}

func (v *toolTimeValue) Type() string { return "MIN-MAX" }

// reproJSON is `repro --json`: the Summary contract plus extras.
type reproJSON struct {
	*repro.HarnessResult
	Sched     *sessions.SchedStats `json:"sched,omitempty"`
	Deviated  int                  `json:"deviated_sessions,omitempty"`
	ServerLog *logscan.Summary     `json:"server_log,omitempty"`
	Bundle    string               `json:"bundle,omitempty"`
	Run       string               `json:"run,omitempty"`
	// Preflight is the passed preflight (absent with --no-preflight).
	Preflight *repro.PreflightResult `json:"preflight,omitempty"`
	// Verdict says how to read the rate (sessions.Assess): "measured",
	// "server_failed" (exit 3) or "needs_control"; Notes say why.
	Verdict string   `json:"verdict"`
	Notes   []string `json:"notes,omitempty"`
	// Interrupted: the run was stopped before every session finished; the
	// rate is over the sessions that finished (the aborted are not counted).
	Interrupted bool `json:"interrupted,omitempty"`
}

func reproRun(opts *ReproOptions) error {
	if opts.ServerLog != "" {
		st, err := os.Stat(opts.ServerLog)
		if err != nil {
			return cmdutil.InputError(fmt.Errorf("server log: %w", err))
		}
		if !st.Mode().IsRegular() {
			// A FIFO blocks the open until a writer comes (Ctrl-C could not
			// stop it); a directory fails mid-run and loses the sched data.
			return cmdutil.InputError(fmt.Errorf("server log %s is not a regular file (%s): --server-log tails a file the server writes", cmdutil.Quote(opts.ServerLog), st.Mode().Type()))
		}
	}
	if opts.Run == "" {
		opts.Run = fmt.Sprintf("repro-seed%d", opts.Seed)
	}
	emitter, err := reproEmitter(opts)
	if err != nil {
		return err
	}
	if emitter != nil {
		defer emitter.Close()
	}
	if opts.apiKeyFromEnv {
		// Picked up without a flag and sent to whatever --url names: say so
		// (the name only, never the key).
		fmt.Fprintf(opts.IO.ErrOut, "repro: sending the API key from OPENAI_API_KEY to %s\n", cmdutil.Quote(opts.URL))
	}
	ho, err := reproHarnessOptions(opts)
	if err != nil {
		return err
	}
	pf, err := reproPreflight(opts, &ho)
	if err != nil {
		return err
	}
	stats := sessions.NewRunStats(opts.Record)
	src := &reproSource{opts: opts, ho: ho}
	p, err := pipeline.New(reproPipeline(opts, &ho, stats, emitter, src))
	if err != nil {
		return cmdutil.InputError(err) // traces says "create bundle: …"
	}
	if opts.IO.IsStderrTTY() && !opts.Watch {
		src.progress = progressBar(opts.IO.ErrOut, "repro", opts.Factory.Now)
	}
	ctx := factoryCtx(opts.Factory)
	runErr := reproRunErr(opts, src, p.Run(ctx, src))
	if emitter != nil {
		reportEmit(opts, emitter)
	}
	if src.res == nil {
		return cmdutil.UsageError("%w", runErr)
	}
	assess := ctx.Err() == nil && !errors.Is(runErr, context.Canceled) && !errors.Is(runErr, repro.ErrServerLost)
	return reproReport(opts, src, stats, pf, assess, runErr)
}

// reproRunErr reports the dashboard's and the recording's ends on stderr and
// merges the run's error: the source's, else the view's, else the bundle's.
func reproRunErr(opts *ReproOptions, src *reproSource, res pipeline.Result) error {
	runErr := res.SourceErr
	if opts.Watch {
		fmt.Fprintf(opts.IO.ErrOut, "repro: watch: %d events shown, %d dropped by the view, %d findings\n", src.view.Events, src.view.Dropped, src.view.Findings)
		if runErr == nil {
			runErr = res.ViewErr
		}
	}
	if res.RecordErr != nil {
		fmt.Fprintf(opts.IO.ErrOut, "repro: record bundle: %v\n", res.RecordErr)
		if runErr == nil {
			runErr = res.RecordErr
		}
	}
	return runErr
}

// reproEmitter dials --emit's collector (nil without --emit).
func reproEmitter(opts *ReproOptions) (*hook.Emitter, error) {
	if opts.Emit == "" {
		return nil, nil
	}
	em, err := hook.Dial(opts.Emit, hook.DialOptions{Run: opts.Run, Source: hook.Source{Proc: "repro"}})
	if err != nil {
		return nil, cmdutil.UsageError("--emit: %w", err)
	}
	return em, nil
}

// reproHarnessOptions are the harness's options from the flags, with the
// conversations file read (its errors name FILE:LINE).
func reproHarnessOptions(opts *ReproOptions) (repro.HarnessOptions, error) {
	host := hook.HostInfo{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
	host.Hostname, _ = os.Hostname()
	ho := repro.HarnessOptions{URL: opts.URL, Model: opts.Model, Sessions: opts.Sessions, Rounds: opts.Rounds,
		Concurrency: opts.Concurrency, Timeout: opts.Timeout, Stream: opts.Stream, Seed: opts.Seed, MaxTokens: opts.MaxTokens, MaxResponseBytes: opts.MaxResponse,
		ToolTime: opts.ToolTime, Classifier: outcome.Classifier{Markers: opts.Markers}, Tool: "kvcanary " + buildinfo.String(), Host: host,
		Run: opts.Run, APIKey: opts.APIKey, Headers: opts.Headers, Sampling: opts.Sampling}
	if opts.Conversations == "" {
		return ho, nil
	}
	convs, digest, err := repro.LoadConversations(opts.Conversations)
	if err != nil {
		return ho, cmdutil.InputError(err) // names FILE:LINE
	}
	ho.Conversations, ho.ConversationsName, ho.ConversationsDigest = convs, opts.Conversations, digest
	if !opts.sessionsSet {
		opts.Sessions = len(convs)
		if opts.concurrencyDefault {
			opts.Concurrency = opts.Sessions
		}
		ho.Sessions, ho.Concurrency = opts.Sessions, opts.Concurrency
	}
	return ho, nil
}

// reproPreflight checks that the server can be measured (unless
// --no-preflight) and settles the model.
func reproPreflight(opts *ReproOptions, ho *repro.HarnessOptions) (*repro.PreflightResult, error) {
	var pf *repro.PreflightResult
	if !opts.NoPreflight {
		var err error
		pf, err = repro.Preflight(opts.Factory.Ctx, *ho)
		var pe *repro.PreflightError
		if errors.As(err, &pe) && opts.JSON.JSON {
			if werr := cmdutil.WriteJSON(opts.IO.Out, map[string]any{"preflight": map[string]any{"ok": false, "error": pe}}); werr != nil {
				return nil, werr
			}
		}
		if err != nil {
			return nil, cmdutil.InputError(err) // exit 3: the hint names the cause
		}
		opts.Model = pf.Model
	} else if opts.Model == "" {
		opts.Model = repro.DiscoverModelWith(opts.Factory.Ctx, ho, min(opts.Timeout, 10*time.Second))
	}
	ho.Model = opts.Model
	return pf, nil
}

// reproPipeline chooses repro's sinks: the run's statistics, the bundle,
// the --emit stream and the dashboard. Every event gets the engine
// settings in its run.start, and --redact's redaction, first.
func reproPipeline(opts *ReproOptions, ho *repro.HarnessOptions, stats *sessions.RunStats, emitter *hook.Emitter, src *reproSource) pipeline.Options {
	settings := reproSettings(opts, ho.HeaderClient())
	po := pipeline.Options{Sinks: []hook.Publisher{stats}}
	if opts.Record != "" {
		po.Record, po.Manifest = opts.Record, traces.Manifest{Tool: ho.Tool, Host: ho.Host, Command: "repro", Run: opts.Run,
			Config: reproConfig(opts, ho, settings)}
	}
	if emitter != nil {
		po.Sinks = append(po.Sinks, emitter)
	}
	po.Middleware = func(next hook.Publisher) hook.Publisher {
		var pub hook.Publisher = hook.PublishFunc(func(ev hook.Event) {
			if rs, ok := ev.Body.(*hook.RunStart); ok && rs != nil && ev.Kind == hook.KindRunStart {
				// The harness knows the workload; the settings are ours.
				c := *rs
				repro.MergeSettings(&c.Config, settings)
				ev.Body = &c
			}
			next.Publish(ev)
		})
		if opts.Redact {
			pub = repro.Redactor{Next: pub}
		}
		return pub
	}
	if opts.Watch {
		po.View, po.ViewCapacity = reproView(opts, src), tui.DefaultLiveCapacity
	}
	return po
}

// reproView is --watch's dashboard: it stays up after the run ends until
// it is quit; quitting first stops the run.
func reproView(opts *ReproOptions, src *reproSource) pipeline.View {
	run := opts.runTUI
	if run == nil {
		run = tui.Run
	}
	return func(ctx context.Context, sub *hook.Subscription, done <-chan error) error {
		var err error
		src.view, err = run(ctx, tui.Options{Title: "kvcanary repro", Source: "repro " + cmdutil.Quote(opts.URL), Run: opts.Run, Sub: sub,
			Done: done, SourceStatus: src.Status, Manifest: traces.Manifest{Tool: "kvcanary " + buildinfo.String(), Command: "repro", Run: opts.Run},
			In: opts.IO.In, Out: opts.IO.Out, NoColor: os.Getenv("NO_COLOR") != ""})
		return err
	}
}

// reproSource is the HTTP harness, with the server's log tailed beside it
// (--server-log): both publish into the pipeline, which serialises them.
type reproSource struct {
	opts     *ReproOptions
	ho       repro.HarnessOptions
	progress func(done, total int) // the status line, on a terminal

	finished, total atomic.Int64
	res             *repro.HarnessResult
	tail            *logscan.Tail
	tailErr         error
	view            tui.Stats
}

func (s *reproSource) Run(ctx context.Context, pub hook.Publisher) error {
	tailDone := make(chan error, 1)
	tailCtx, stopTail := context.WithCancel(context.Background())
	defer stopTail()
	if s.opts.ServerLog != "" {
		loc, _ := logscan.ParseZone(s.opts.TZ) // checked with the flags
		s.tail = logscan.NewTail(s.opts.ServerLog, pub, logscan.TailOptions{Src: hook.Source{Proc: "server-log"}, Run: s.opts.Run, Parse: logscan.Options{Location: loc}})
		fmt.Fprintf(s.opts.IO.ErrOut, "repro: server log timestamps read in %s (--tz)\n", logscan.DescribeZone(loc, reproNow(s.opts)))
		go func() { tailDone <- s.tail.Run(tailCtx) }()
		select { // the tail is at the log's end (or failed) before the first request
		case <-s.tail.Ready():
		case <-ctx.Done():
		}
	} else {
		tailDone <- nil
	}
	s.ho.Publisher = pub
	s.ho.Progress = func(done, all int) {
		s.finished.Store(int64(done))
		s.total.Store(int64(all))
		if s.progress != nil {
			s.progress(done, all)
		}
	}
	var err error
	s.res, err = repro.RunHarness(ctx, s.ho)
	// Stopped, the tail reads the log to its end before it returns: every
	// line the server wrote during the run is in.
	stopTail()
	s.tailErr = <-tailDone
	return err
}

// reproNow is the command's clock.
func reproNow(opts *ReproOptions) time.Time {
	if opts.Factory != nil && opts.Factory.Now != nil {
		return opts.Factory.Now()
	}
	return time.Now()
}

// Status is "3/80 sessions finished".
func (s *reproSource) Status() string {
	return fmt.Sprintf("%d/%d sessions finished", s.finished.Load(), s.total.Load())
}

// reportEmit says what the --emit stream delivered and lost.
func reportEmit(opts *ReproOptions, emitter *hook.Emitter) {
	emitter.Close()
	st := emitter.Stats()
	fmt.Fprintf(opts.IO.ErrOut, "repro: emit: %d events sent to %s, %d dropped", st.Sent, cmdutil.Quote(opts.Emit), st.Dropped+st.Invalid)
	if e := emitter.LastError(); e != "" && st.Dropped > 0 {
		fmt.Fprintf(opts.IO.ErrOut, " (last error: %s)", cmdutil.Quote(e))
	}
	fmt.Fprintln(opts.IO.ErrOut)
}

// reproReport prints the result (text or --json) and says how to read it;
// assess is false for a run cut short (interrupted, or its server lost),
// whose aborted sessions say nothing about the server.
func reproReport(opts *ReproOptions, src *reproSource, stats *sessions.RunStats, pf *repro.PreflightResult, assess bool, runErr error) error {
	res := src.res
	if opts.Redact {
		for i := range res.PerSession {
			s := &res.PerSession[i]
			if s.Output != "" {
				s.Output = repro.Redacted(s.Output)
			}
			s.Reason = repro.RedactReason(s.Reason)
		}
		// Its reasons are Go error text, which can quote what the server sent.
		var lost *repro.ServerLostError
		if errors.As(runErr, &lost) {
			l := *lost
			l.Reason, l.Probe = repro.RedactReason(l.Reason), repro.RedactReason(l.Probe)
			res.ServerLost = l.Error()
		}
	}
	if src.tailErr != nil && src.tailErr != context.Canceled {
		fmt.Fprintf(opts.IO.ErrOut, "repro: server log: %v\n", src.tailErr)
	}
	out := reproJSON{HarnessResult: res, Deviated: stats.Deviated, Bundle: opts.Record, Run: opts.Run, Preflight: pf, Verdict: sessions.VerdictMeasured}
	if assess {
		var note string
		out.Verdict, note = sessions.Assess(res.Outcomes)
		if note != "" {
			out.Notes = append(out.Notes, note)
		}
	} else if res.ServerLost != "" {
		out.Verdict = sessions.VerdictServerLost
	} else {
		out.Interrupted = true
	}
	if pf != nil {
		out.Notes = append(out.Notes, pf.Notes...)
	}
	if n := res.Throttled; n > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("%s kept getting HTTP 429 (throttled) after %d retries and %s not counted: no answer is no outcome; lower --concurrency or raise the server's rate limit",
			plural(int64(n), "session"), repro.ThrottleRetries, map[bool]string{true: "is", false: "are"}[n == 1]))
	}
	if src.tail != nil {
		s := stats.Sched
		out.Sched = &s
		out.ServerLog = src.tail.Summary()
	}
	if err := writeJSONOr(opts.IO.Out, opts.JSON.JSON, out, func() error { return writeReproText(opts.IO.Out, out) }); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	if out.Verdict == sessions.VerdictServerFailed {
		return reproServerFailed(res, out.ServerLog)
	}
	return nil
}

// reproServerFailed is the exit-3 error of a run in which every session
// failed: the rate is not a measurement, like a preflight failure. Unless
// the server's log shows PD transfer failures: requests aborted by a failed
// transfer are the bug class itself.
func reproServerFailed(res *repro.HarnessResult, sl *logscan.Summary) error {
	first := ""
	for _, s := range res.PerSession {
		if s.Reason != "" {
			first = s.Reason
			break
		}
	}
	if sl != nil && sl.TransferFailures+sl.MetadataCorruptions > 0 {
		return cmdutil.InputError(fmt.Errorf("repro: every session ended in error or timeout (first: %s), and the server log shows %d PD transfer failures and %d metadata corruptions: the failures may be the corruption itself, see kvcanary logs scan",
			cmdutil.Quote(first), sl.TransferFailures, sl.MetadataCorruptions))
	}
	return cmdutil.InputError(fmt.Errorf("repro: no measurement: every session ended in error or timeout (first: %s)",
		cmdutil.Quote(first)))
}

// progressBar returns a Progress callback drawing a bar on the status line
// of a terminal.
func progressBar(w io.Writer, label string, now func() time.Time) func(done, total int) {
	line := pipeline.NewStatusLine(w, true, now)
	return func(done, total int) {
		const width = 30
		fill := width * done / max(total, 1)
		line.Set(fmt.Sprintf("%s [%s%s] %d/%d sessions", label, strings.Repeat("#", fill), strings.Repeat(" ", width-fill), done, total))
		if done == total {
			line.Clear()
		}
	}
}

// writeCorrupted lists the first five corrupted sessions with their reason
// and the reply that ended them (quoted).
func writeCorrupted(w io.Writer, r reproJSON) {
	shown := 0
	for _, s := range r.PerSession {
		if !outcome.IsCorrupted(s.Outcome) {
			continue
		}
		if shown == 5 {
			fmt.Fprintf(w, "  … %s (--json lists all)\n", plural(int64(r.CorruptedSessions-shown), "more corrupted session"))
			break
		}
		shown++
		fmt.Fprintf(w, "  %s %s round %d: %s", s.ID, s.Outcome, s.Rounds, cmdutil.Quote(s.Reason))
		if s.Output != "" {
			fmt.Fprintf(w, ": %s", cmdutil.Quote(clipText(s.Output, 120)))
		}
		fmt.Fprintln(w)
	}
}

// writeReproHeadline prints how the run ended, when not whole, and the
// rate, or why there is none.
func writeReproHeadline(w io.Writer, r reproJSON) {
	if r.Interrupted {
		fmt.Fprintf(w, "INTERRUPTED: %d sessions finished before the stop, %d were cut short and are not counted; the rate below is over the finished ones\n",
			r.Sessions, r.Aborted)
	}
	if r.ServerLost != "" {
		fmt.Fprintf(w, "SERVER LOST: %s\n", r.ServerLost)
		fmt.Fprintf(w, "%d sessions finished before it, %d were cut short by it or never started and are not counted", r.Sessions, r.Aborted)
		if r.Sessions == 0 {
			fmt.Fprintln(w, "\nNO MEASUREMENT: no session finished before the server went away")
			return
		}
		fmt.Fprintln(w, "; the rate below is over the finished ones")
	}
	if r.Verdict == sessions.VerdictServerFailed {
		// Assess's note, said here and not again under "note:".
		_, note := sessions.Assess(r.Outcomes)
		fmt.Fprintf(w, "NO MEASUREMENT: %s\n", note)
		return
	}
	fmt.Fprintln(w, r.Headline())
	if line := serverErrorsLine(r); line != "" {
		fmt.Fprintln(w, line)
	}
}

// serverErrorsLine says, beside the headline, how many of the run's error
// sessions were the server failing loudly (HTTP 5xx, no answer): they count
// as error in the rate, whose definition does not change with the cause (ab
// and the statistics compare like with like), but they are not the silent
// corruption it is after. "" when there were none.
func serverErrorsLine(r reproJSON) string {
	if r.HarnessResult == nil || r.ServerErrors == 0 {
		return ""
	}
	var kinds []string
	for _, k := range []string{repro.FailureHTTP5xx, repro.FailureTransport} {
		if n := r.FailedRequests[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", failureNames[k], n))
		}
	}
	silent := r.Outcomes.Leak + r.Outcomes.NoTool
	return fmt.Sprintf("SERVER ERRORS: %d of the %d error sessions ended in a server failure (%s), loud rather than silent; "+
		"silent corruption (leak, no_tool) alone: %d/%d = %.0f%%",
		r.ServerErrors, r.Outcomes.Error, strings.Join(kinds, ", "), silent, r.Sessions, 100*float64(silent)/float64(max(r.Sessions, 1)))
}

// failureNames spell repro's failure classes for people.
var failureNames = map[string]string{
	repro.FailureHTTP5xx: "HTTP 5xx", repro.FailureTransport: "no answer (transport)", repro.FailureHTTP4xx: "HTTP 4xx",
	repro.FailureTimeout: "timeout", repro.FailureOther: "not an OpenAI answer",
}

func writeReproText(w io.Writer, r reproJSON) error {
	writeReproHeadline(w, r)
	_, assessed := sessions.Assess(r.Outcomes)
	for _, n := range r.Notes {
		if r.Verdict == sessions.VerdictServerFailed && n == assessed {
			continue // the headline
		}
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if p := r.Preflight; p != nil {
		fmt.Fprintf(w, "preflight: ok (model %s listed, probe %s answered with a structured call to %s)\n",
			cmdutil.Quote(p.Model), cmdutil.Quote(p.ProbeRequest), cmdutil.Quote(p.ProbeTool))
	}
	o := r.Outcomes
	fmt.Fprintf(w, "outcomes: done=%d maxrounds=%d leak=%d no_tool=%d error=%d timeout=%d\n", o.Done, o.MaxRounds, o.Leak, o.NoTool, o.Error, o.Timeout)
	var fr []string
	for _, k := range []string{"stop", "tool_calls", "length", "abort", ""} {
		if n := r.FinishReasons[k]; n > 0 {
			name := k
			if name == "" {
				name = "(none)"
			}
			fr = append(fr, fmt.Sprintf("%s=%d", name, n))
		}
	}
	for k, n := range r.FinishReasons {
		switch k {
		case "stop", "tool_calls", "length", "abort", "":
		default:
			fr = append(fr, fmt.Sprintf("%s=%d", cmdutil.Quote(k), n))
		}
	}
	finish := strings.Join(fr, " ")
	if finish == "" {
		finish = "none (no request was answered)"
	}
	sent := fmt.Sprint(r.Requests)
	if len(r.FailedRequests) > 0 {
		var failed []string
		n := 0
		for _, k := range []string{repro.FailureHTTP5xx, repro.FailureTransport, repro.FailureHTTP4xx, repro.FailureTimeout, repro.FailureOther} {
			if c := r.FailedRequests[k]; c > 0 {
				failed = append(failed, fmt.Sprintf("%s %d", failureNames[k], c))
				n += c
			}
		}
		sent += fmt.Sprintf(" (%d answered, %d failed: %s)", r.Requests-n, n, strings.Join(failed, ", "))
	}
	fmt.Fprintf(w, "requests: %s to %s (model %s, concurrency %d, tool time %s); finish reasons: %s; n-gram loops: %d sessions\n",
		sent, cmdutil.Quote(r.URL), cmdutil.Quote(r.Model), r.Concurrency, r.ToolTime, finish, r.Loops)
	if r.Sched != nil {
		retracted := "no retractions"
		if n := r.Sched.RetractionEvents; n > 0 {
			retracted = plural(int64(r.Sched.Retractions), "request") + " retracted in " + plural(int64(n), "retraction")
		}
		fmt.Fprintf(w, "server log: %d sched observations, peak running-req %d, peak token usage %.2f, %s\n",
			r.Sched.Observations, r.Sched.PeakRunningReq, r.Sched.PeakTokenUsage, retracted)
	}
	if l := r.ServerLog; l != nil && l.TransferFailures+l.MetadataCorruptions > 0 {
		// PD failures abort requests with an HTTP 500: they read as session
		// errors above, and "kvcanary logs scan" lists them with their rooms.
		fmt.Fprintf(w, "server log: PD transfer failures %d (%s), metadata buffer collisions %d (%s)\n",
			l.TransferFailures, plural(l.TransferFailedRooms, "room"), l.MetadataCorruptions, plural(l.MetadataCorruptedRooms, "room"))
	}
	writeCorrupted(w, r)
	fmt.Fprintf(w, "wall: %.1fs\n", r.WallSeconds)
	if r.Bundle != "" {
		fmt.Fprintf(w, "bundle: %s (run %s)\n", r.Bundle, cmdutil.Quote(r.Run))
	}
	return nil
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
