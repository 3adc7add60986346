package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
)

// SimServeOptions are the inputs of `kvcanary sim serve`.
type SimServeOptions struct {
	IO          *cmdutil.IOStreams
	Factory     *cmdutil.Factory
	Engine      *engineFlags
	Addr        string
	AllowRemote bool
	Seed        uint64
	Rounds      int
	Model       string
	Record      string
	Run         string // run id of the bundle and its events
	StepTime    time.Duration
	AllowHosts  []string      // Host names accepted besides loopback ones
	BodyTimeout time.Duration // bound on receiving a request body
	Export      exportOptions
	JSON        *cmdutil.JSONFlags

	// Ready, when set, receives the listening address once the server accepts
	// connections (tests use it with --addr 127.0.0.1:0).
	Ready func(addr string)
}

// withSubcommands adds subs to parent (used to hang commands of other files
// under a parent built elsewhere) and returns parent.
func withSubcommands(parent *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	parent.AddCommand(subs...)
	return parent
}

// simServeLong is the long help of `kvcanary sim serve`.
const simServeLong = `Serve the twin as an OpenAI-compatible endpoint: POST /v1/chat/completions
(non-streaming and "stream": true), GET /v1/models, GET /health, and
GET /debug/kvcanary/requests with the ground truth of every request (did its
output leave the script, and was that visible in the protocol).

Concurrent requests share the twin's scheduler, so they batch together and
corrupt the way sim run's sessions do. A conversation's first user message
names its session (its hash picks the script) and may say "tool rounds: N";
the round is the number of assistant messages so far. kvcanary repro speaks
this; so does any OpenAI client.

An engine step takes at least --step-time of wall time (default 25 ms, the
twin's simulated step), as a decode step does on a GPU, so a client's tool
time between rounds spans a known number of steps: repro's default
--tool-time of 1.5s-6s is the 60-240 steps of sim run's think time, and
serve reproduces at sim run's rate. "--step-time 0" steps as fast as the
machine allows; then tool time spans many more steps than on a GPU and rates
are not comparable with sim run. Steps that take longer to compute than
--step-time are counted in the summary.

The server listens on loopback only unless --allow-remote is given. It
accepts requests whose Host is a loopback name (localhost, 127.0.0.1, ::1),
the --addr host, or a name given with --allow-host, and refuses (403) any
other Host and any request a browser page of another origin sends, so a web
page cannot post sessions into a running experiment (DNS rebinding,
cross-site POST). POST bodies must be application/json (else 415) and arrive
within --body-timeout (default 30s; else 408 and the connection is closed).
Stop it
with Ctrl-C: it then prints how many requests deviated and, with --record,
closes the bundle (engine events plus one session event per session).`

// NewCmdSimServe builds `kvcanary sim serve`.
func NewCmdSimServe(f *cmdutil.Factory, runF func(*SimServeOptions) error) *cobra.Command {
	opts := &SimServeOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the twin over an OpenAI-compatible HTTP API",
		Long:  simServeLong,
		Example: `  kvcanary sim serve --addr 127.0.0.1:30000
  kvcanary sim serve --multi-stream-overlap=false --record serve.kvtrace
  kvcanary repro --url http://127.0.0.1:30000 --sessions 80 --rounds 4`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkServeAddr(opts.Addr, opts.AllowRemote); err != nil {
				return err
			}
			if opts.Rounds < 1 || opts.Rounds > sim.MaxRounds {
				return cmdutil.UsageError("--rounds %d: want 1 to %d (the twin's %d-token context is full by about the 17th round)", opts.Rounds, sim.MaxRounds, sim.ContextLen)
			}
			if opts.StepTime < 0 {
				return cmdutil.UsageError("--step-time %v: want 0 or a positive duration", opts.StepTime)
			}
			if opts.BodyTimeout <= 0 {
				return cmdutil.UsageError("--body-timeout %v: want a positive duration", opts.BodyTimeout)
			}
			return runOr(opts, runF, simServeRun)
		},
	}
	opts.Engine = addEngineFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&opts.Addr, "addr", "127.0.0.1:30000", "address to listen on (host:port)")
	fl.BoolVar(&opts.AllowRemote, "allow-remote", false, "allow an address reachable from other hosts (no authentication!)")
	fl.StringArrayVar(&opts.AllowHosts, "allow-host", nil, "also accept requests whose Host header names this host (repeatable; loopback names and the --addr host are always accepted)")
	fl.DurationVar(&opts.BodyTimeout, "body-timeout", server.DefaultBodyTimeout, "longest time a client may take to send a request body")
	fl.Uint64Var(&opts.Seed, "seed", 1, "seed of the scripts, rooms and stream interleaving")
	fl.IntVar(&opts.Rounds, "rounds", 4, "rounds per session for conversations that do not state their tool rounds")
	fl.StringVar(&opts.Model, "model", server.DefaultModel, "model id reported by /v1/models")
	fl.StringVar(&opts.Record, "record", "", "record engine and session events to this trace bundle; a bundle already there is kept, renamed with its time")
	fl.StringVar(&opts.Run, "run", "", "with --record: run `ID` of the bundle and every event (default serve-seed<seed>)")
	fl.DurationVar(&opts.StepTime, "step-time", server.EngineStepTime, "least wall time of one engine step, as on a GPU, so clients' tool time spans a known number of steps (0: as fast as the machine allows)")
	addExportFlags(cmd, &opts.Export)
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

// checkServeAddr refuses addresses other hosts could reach unless allowed.
func checkServeAddr(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return cmdutil.UsageError("--addr %q: want host:port: %w", addr, err)
	}
	if allowRemote || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return cmdutil.UsageError("--addr %q is not a loopback address; pass --allow-remote to serve other hosts (there is no authentication)", addr)
}

func simServeRun(opts *SimServeOptions) error {
	cfg, err := opts.Engine.config(opts.Seed)
	if err != nil {
		return err
	}
	// Listen first: a busy or bad address must not leave a log file or a
	// truncated bundle behind.
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return cmdutil.InputError(fmt.Errorf("listen on %s: %w", opts.Addr, err))
	}
	defer ln.Close()
	if p := opts.Engine.logFile; p != "" {
		logF, err := os.Create(p)
		if err != nil {
			return cmdutil.InputError(fmt.Errorf("open log file: %w", err))
		}
		defer logF.Close()
		// Unbuffered: a server log is tailed while it grows (repro --server-log).
		cfg.Log = logF
	}
	var po pipeline.Options
	if opts.Record != "" {
		rc := cfg.RunConfig()
		rc.URL = "http://" + ln.Addr().String()
		rc.Rounds = opts.Rounds
		rc.StepTime = opts.StepTime.String()
		po.StampRun = cmp.Or(opts.Run, fmt.Sprintf("serve-seed%d", opts.Seed))
		po.Record, po.KeepPrevious, po.Manifest = opts.Record, true, traces.Manifest{Tool: "kvcanary " + buildinfo.String(), Host: hook.HostInfo{OS: "sim", Arch: "twin"},
			Config: rc, Run: po.StampRun, Command: "sim serve"}
	}
	// A pipeline error is traces' "create bundle: …".
	p, stopExport, err := opts.Export.newPipeline(factoryCtx(opts.Factory), opts.IO.ErrOut, exportSource{Run: cmp.Or(opts.Run, fmt.Sprintf("serve-seed%d", opts.Seed)), Warmup: twinWarmup}, po, "")
	if err != nil {
		return err
	}
	defer stopExport()
	reportKept(opts.IO.ErrOut, "sim serve", p, opts.Record)
	src := &serveSource{opts: opts, cfg: cfg, ln: ln, events: opts.Record != "" || opts.Export.enabled()}
	res := p.Run(factoryCtx(opts.Factory), src)
	switch {
	case res.SourceErr != nil:
		return res.SourceErr
	case res.RecordErr != nil:
		return fmt.Errorf("record bundle: %w", res.RecordErr)
	}
	return writeServeSummary(opts, src.srv)
}

// serveSource is the twin behind an OpenAI-compatible HTTP server: its
// events (with --record) come from the requests clients send, until ctx.
type serveSource struct {
	opts *SimServeOptions
	cfg  sim.Config
	ln   net.Listener
	srv  *server.Server // set once Run has built it
	// events: a bundle or an exporter listens (without one the server
	// makes no events).
	events bool
}

func (s *serveSource) Run(ctx context.Context, pub hook.Publisher) error {
	opts := s.opts
	hosts := opts.AllowHosts
	if h, _, err := net.SplitHostPort(opts.Addr); err == nil && h != "" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, h) // the name clients were told to use
		}
	}
	so := server.Options{Config: s.cfg, Rounds: opts.Rounds, Model: opts.Model, StepTime: opts.StepTime,
		Judge: outcome.Classifier{}.Outcome, AllowedHosts: hosts, BodyTimeout: opts.BodyTimeout}
	if s.events {
		so.Publisher = pub
	}
	srv, err := server.New(so)
	if err != nil {
		return err
	}
	s.srv = srv
	return s.serve(ctx, srv)
}

// serve answers requests until ctx ends, then lets those in flight finish.
func (s *serveSource) serve(ctx context.Context, srv *server.Server) error {
	// The engine loop outlives Ctrl-C until the HTTP server has shut down,
	// so requests in flight get their answers instead of a dropped
	// connection.
	loopCtx, stopLoop := context.WithCancel(context.Background())
	defer stopLoop()
	loopErr := make(chan error, 1)
	go func() { loopErr <- srv.Run(loopCtx) }()
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(s.ln) }()
	addr := s.ln.Addr().String()
	fmt.Fprintf(s.opts.IO.ErrOut, "sim serve: listening on http://%s (POST /v1/chat/completions, GET /v1/models, GET /health, GET /get_server_info); Ctrl-C stops\n", addr)
	if s.opts.Ready != nil {
		s.opts.Ready(addr)
	}
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("serve http: %w", err)
	}
	// Requests in flight may need a few hundred steps: take them at full
	// speed so they finish within the shutdown grace.
	srv.SetStepTime(0)
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = hs.Shutdown(sctx)
	scancel()
	stopLoop()
	<-loopErr
	srv.Close()
	return runErr
}

type serveSummary struct {
	Addr             string `json:"addr"`
	Requests         int    `json:"requests"`                 // the sessions' requests
	Probes           int    `json:"probe_requests,omitempty"` // a client's preflight probes (X-Kvcanary-Probe): in no session, counted apart
	Sessions         int    `json:"sessions"`
	DeviatedRequests int    `json:"deviated_requests"`
	BrokenRequests   int    `json:"broken_requests"`
	DeviatedSessions int    `json:"deviated_sessions"`
	PeakRunningReq   int    `json:"peak_running_req"`
	Retractions      int    `json:"retractions"`
	Steps            uint64 `json:"steps"`
	GraphReplays     uint64 `json:"graph_replays"`
	EagerSteps       uint64 `json:"eager_steps"`
	// StepTime is --step-time; StepOverruns counts the steps whose
	// computation alone took longer (then tool time spans fewer steps than
	// it would on a faster machine), MaxStepMS is the slowest.
	StepTime     string  `json:"step_time"`
	StepOverruns uint64  `json:"step_overruns"`
	MaxStepMS    float64 `json:"max_step_compute_ms"`
}

func writeServeSummary(opts *SimServeOptions, srv *server.Server) error {
	s := serveSummary{Addr: opts.Addr}
	for _, r := range srv.Records() {
		if r.Probe {
			s.Probes++
			continue
		}
		s.Requests++
		if r.Deviated {
			s.DeviatedRequests++
		}
		if r.Broken {
			s.BrokenRequests++
		}
	}
	for _, ss := range srv.Sessions() {
		s.Sessions++
		if ss.Deviated {
			s.DeviatedSessions++
		}
	}
	st := srv.Stats()
	s.PeakRunningReq, s.Retractions, s.Steps = st.PeakRunningReq, st.Retractions, st.Steps
	s.GraphReplays, s.EagerSteps = st.GraphReplays, st.EagerSteps
	p := srv.Pace()
	s.StepTime, s.StepOverruns, s.MaxStepMS = opts.StepTime.String(), p.Overruns, float64(p.MaxCompute.Microseconds())/1000
	if opts.JSON.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, s)
	}
	probes := ""
	if s.Probes > 0 {
		probes = fmt.Sprintf(" (and %s, in none)", plural(int64(s.Probes), "preflight probe"))
	}
	_, err := fmt.Fprintf(opts.IO.Out, "sim serve: %d requests in %d sessions%s; deviated from the script: %d requests (%d visible in the protocol) in %d sessions; peak running-req %d, retractions %d, steps %d (graph %d, eager %d)\n",
		s.Requests, s.Sessions, probes, s.DeviatedRequests, s.BrokenRequests, s.DeviatedSessions, s.PeakRunningReq, s.Retractions, s.Steps, s.GraphReplays, s.EagerSteps)
	if err != nil {
		return err
	}
	if opts.StepTime > 0 {
		_, err = fmt.Fprintf(opts.IO.Out, "pacing: %v per step; %d of %d steps took longer to compute (slowest %.1f ms)\n", opts.StepTime, p.Overruns, p.Steps, s.MaxStepMS)
	}
	return err
}
