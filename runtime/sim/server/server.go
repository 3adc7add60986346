package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/openaiwire"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultModel is the model id the server reports and accepts by default.
const DefaultModel = "kvcanary-twin"

// EngineStepTime is the simulated duration of one engine step: the
// engine's clock (sim.Engine.Now, event timestamps) advances this much per
// step. `kvcanary sim serve` paces steps to it by default, so a client's
// wall-clock tool time of 1.5–6 s spans 60–240 steps, the think time of
// sim run's workload (sim.DefaultWorkload).
const EngineStepTime = sim.StepTime

// DefaultMaxBody bounds a request body.
const DefaultMaxBody = 8 << 20

// DefaultBodyTimeout bounds the time a client may take to send a request
// body once its headers arrived; a body still incomplete then is refused
// (408) and its memory freed.
const DefaultBodyTimeout = 30 * time.Second

// Options configure a Server.
type Options struct {
	Config    sim.Config     // engine configuration, seed included
	Rounds    int            // rounds per session for scripts whose first message states none (default 4)
	Model     string         // model id (default DefaultModel); requests may name any model
	Publisher hook.Publisher // engine events and, at Close, one session event per session; nil: none
	// Judge classifies each reply as a client sees it, so that the session
	// events Close publishes carry outcomes (sim serve passes
	// outcome.Classifier{}.Outcome). The server itself only observes: with
	// no Judge, records carry no outcome and Close publishes no sessions.
	Judge   sim.Judge
	MaxBody int64 // request body limit (default DefaultMaxBody)
	// BodyTimeout bounds reading a request body (default DefaultBodyTimeout).
	BodyTimeout time.Duration
	// AllowedHosts are Host header names (without port) accepted besides
	// loopback ones (localhost, *.localhost, 127.0.0.0/8, ::1). Requests
	// naming any other host, or sent from a browser page of another origin,
	// are refused (403): a web page must not drive a running experiment by
	// DNS rebinding or a cross-site POST.
	AllowedHosts []string
	// StreamChunkTokens is how many output tokens one content delta of a
	// stream carries (default 8).
	StreamChunkTokens int
	// Now stamps responses' "created" (default time.Now).
	Now func() time.Time
	// StepTime is the least wall time one engine step takes (0: step as
	// fast as the machine allows). Pacing gives a step a duration, as a
	// GPU does, so that a client's wall-clock delays (tool execution
	// between rounds) span a known number of steps: with StepTime equal to
	// EngineStepTime, the engine's simulated clock and the wall clock
	// agree. A step whose computation takes longer is not shortened to
	// catch up; PaceStats counts such overruns.
	StepTime time.Duration
}

// PaceStats describes how the engine loop kept the step time.
type PaceStats struct {
	StepTime   time.Duration `json:"step_time_ns"`   // the current step time
	Steps      uint64        `json:"steps"`          // steps Run took
	Overruns   uint64        `json:"overruns"`       // steps whose computation alone took longer than StepTime
	MaxCompute time.Duration `json:"max_compute_ns"` // the slowest step's computation
	Compute    time.Duration `json:"compute_ns"`     // all steps' computation
}

// RequestRecord is the ground truth of one served request.
type RequestRecord struct {
	ID               string `json:"id"` // the response id (chatcmpl-…)
	Session          string `json:"session"`
	Round            int    `json:"round"`
	ExpectToolCall   bool   `json:"expect_tool_call"`
	Deviated         bool   `json:"deviated"` // output tokens differ from the script's
	Broken           bool   `json:"broken"`   // the deviation is visible in the protocol
	Leak             bool   `json:"leak"`     // DSML markup left in content
	ToolCalls        int    `json:"tool_calls"`
	FinishReason     string `json:"finish_reason"` // the engine's: stop, length or abort
	Stream           bool   `json:"stream"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	Retractions      int    `json:"retractions"`
	Step             uint64 `json:"step"`
	Reused           int    `json:"reused_turns"` // earlier turns matched to this server's own output
	// Outcome is Options.Judge's verdict on this reply: an outcome that
	// ends the session, or "" when it goes on (or there is no judge).
	Outcome    string `json:"outcome,omitempty"`
	JudgeError string `json:"judge_error,omitempty"` // the judge returned an outcome outside hook.Outcomes (then Outcome is error)
	// Excerpt is the reply's content (hook.Excerpt-bounded) when the judge
	// found it corrupted (leak, no_tool); Reason why an aborted request
	// failed.
	Excerpt string `json:"excerpt,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Probe marks a request sent with openaiwire.ProbeHeader (a client's
	// preflight check): recorded, but part of no session.
	Probe bool `json:"probe,omitempty"`
}

// Server is the twin behind an OpenAI-compatible HTTP API. Run drives its
// engine; Handler serves requests; Close publishes the sessions.
type Server struct {
	opts  Options
	eng   *sim.Engine
	vocab *sim.Vocab

	mu       sync.Mutex
	seq      int
	scripts  map[scriptKey]sim.Script
	outputs  map[outputKey]servedOutput
	records  []RequestRecord
	stats    sim.Stats
	stepNum  uint64
	pace     PaceStats
	stepTime atomic.Int64 // Options.StepTime, or as SetStepTime changed it
	running  bool
	closed   bool
	loopDone chan struct{}
}

type scriptKey struct {
	idx, toolRounds int
	tools           string // the offered tool names, comma-joined
}

type outputKey struct {
	session string
	round   int
	sig     string
}

type servedOutput struct{ tokens []sim.Token }

// New builds a server and its engine. Call Run to start stepping.
func New(opts Options) (*Server, error) {
	if opts.Rounds == 0 {
		opts.Rounds = 4
	}
	if opts.Rounds < 1 || opts.Rounds > sim.MaxRounds {
		return nil, fmt.Errorf("new server: rounds %d: want 1 to %d", opts.Rounds, sim.MaxRounds)
	}
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.StreamChunkTokens <= 0 {
		opts.StreamChunkTokens = 8
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StepTime < 0 {
		return nil, fmt.Errorf("new server: step time %v: want 0 or a positive duration", opts.StepTime)
	}
	if opts.Publisher == nil {
		opts.Publisher = hook.PublishFunc(func(hook.Event) {})
	}
	if opts.Config.Clock == nil {
		// One clock: the engine's events and log lines carry the wall
		// time, like its clients' events (a real server's are real).
		opts.Config.Clock = opts.Now
	}
	eng, err := sim.NewEngine(opts.Config, opts.Publisher)
	if err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	s := &Server{opts: opts, eng: eng, vocab: sim.DefaultVocab(), scripts: map[scriptKey]sim.Script{},
		outputs: map[outputKey]servedOutput{}, loopDone: make(chan struct{})}
	s.stepTime.Store(int64(opts.StepTime))
	return s, nil
}

// Run steps the engine until ctx is done: while requests are in flight it
// steps continuously (each step taking at least the step time), otherwise
// it sleeps until a submission. It returns ctx's error. Call it once.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	defer close(s.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var next time.Time // when the next step may start; zero: now
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.eng.Idle() {
			select {
			case <-s.eng.Wake():
			case <-ctx.Done():
				return ctx.Err()
			}
			next = time.Time{} // an idle engine starts the first step at once
			continue
		}
		stepTime := time.Duration(s.stepTime.Load())
		if d := time.Until(next); stepTime > 0 && d > 0 {
			timer.Reset(min(d, stepTime))
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		t0 := time.Now()
		s.eng.Step()
		compute := time.Since(t0)
		st, n := s.eng.Stats(), s.eng.StepNumber()
		if stepTime > 0 {
			// Step k+1 is due one step time after step k was due; a sleep
			// that overslept a little keeps that schedule (no drift), a
			// step that started late (an overrun, a wake from idle) starts
			// a new one.
			base := next
			if base.IsZero() || t0.Sub(base) > stepTime/4 {
				base = t0
			}
			next = base.Add(stepTime)
		} else {
			next = time.Time{}
		}
		s.mu.Lock()
		s.stats, s.stepNum = st, n
		s.pace.Steps++
		s.pace.Compute += compute
		s.pace.MaxCompute = max(s.pace.MaxCompute, compute)
		if stepTime > 0 && compute > stepTime {
			s.pace.Overruns++
		}
		s.mu.Unlock()
	}
}

// SetStepTime changes the step time from the next step on; 0 steps as fast
// as the machine allows (sim serve does that on Ctrl-C, so requests in
// flight are answered within the HTTP server's shutdown grace). Safe for
// concurrent use.
func (s *Server) SetStepTime(d time.Duration) {
	s.stepTime.Store(int64(max(d, 0)))
}

// Pace returns how the engine loop has kept the step time so far; StepTime
// is the current step time.
func (s *Server) Pace() PaceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pace
	p.StepTime = time.Duration(s.stepTime.Load())
	return p
}

// Close rejects new requests, waits for Run to return (the caller cancels
// its context first) and, with a Judge, publishes one session event per
// session seen.
func (s *Server) Close() {
	s.eng.Close()
	s.mu.Lock()
	running := s.running
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if running {
		<-s.loopDone
	}
	if already {
		return
	}
	if s.opts.Judge == nil {
		return
	}
	ts := s.eng.Now().UnixNano()
	for _, sess := range s.Sessions() {
		s.opts.Publisher.Publish(hook.Event{Kind: hook.KindSession, TS: ts, Src: hook.Source{Proc: "sim-serve"}, Body: &sess})
	}
}

// Records returns a copy of every request's ground-truth record, in the order
// the requests finished.
func (s *Server) Records() []RequestRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RequestRecord(nil), s.records...)
}

// Stats returns the engine's scheduler counters as of the last step.
func (s *Server) Stats() sim.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Sessions folds the records into one session event body per session, in
// session order: Requests are the response ids, Deviated says whether any
// request left the script, and Outcome follows the judge's verdicts as a
// client would: the first corrupted verdict (leak, no_tool) decides, an
// engine abort is error (as a harness classifies a failed request), and
// otherwise the last reply's verdict holds, maxrounds when the session
// stopped after a tool call. Without Options.Judge, Outcome is "".
func (s *Server) Sessions() []hook.Session {
	recs := s.Records()
	by := map[string]*hook.Session{}
	var order []string
	for _, r := range recs {
		if r.Probe {
			continue // a client's preflight check, not a session of its run
		}
		ss := by[r.Session]
		if ss == nil {
			ss = &hook.Session{ID: r.Session}
			by[r.Session] = ss
			order = append(order, r.Session)
		}
		ss.Rounds++
		ss.Requests = append(ss.Requests, r.ID)
		ss.FinishReasons = append(ss.FinishReasons, r.FinishReason)
		ss.Deviated = ss.Deviated || r.Deviated
		switch {
		case s.opts.Judge == nil:
		case ss.Outcome == hook.OutcomeLeak || ss.Outcome == hook.OutcomeNoTool || ss.Outcome == hook.OutcomeError:
			// the first break decides
		case r.FinishReason == "abort":
			ss.Outcome, ss.Round, ss.Reason = hook.OutcomeError, ss.Rounds, r.Reason
		case r.Outcome != "":
			ss.Outcome = r.Outcome
			if ss.Outcome == hook.OutcomeLeak || ss.Outcome == hook.OutcomeNoTool || ss.Outcome == hook.OutcomeError {
				ss.Round, ss.Excerpt = ss.Rounds, r.Excerpt
			}
		default:
			ss.Outcome = hook.OutcomeMaxRounds
		}
	}
	sort.Strings(order)
	out := make([]hook.Session, 0, len(order))
	for _, id := range order {
		out = append(out, *by[id])
	}
	return out
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.handleChat)
	mux.HandleFunc("/v1/models", s.handleModels)
	mux.HandleFunc("/health", s.handleHealth)
	mux.HandleFunc("/get_server_info", s.handleServerInfo)
	mux.HandleFunc("/server_info", s.handleServerInfo)
	mux.HandleFunc("/debug/kvcanary/requests", s.handleDebug)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error",
			Message: fmt.Sprintf("no route %s %s; the twin serves POST /v1/chat/completions, GET /v1/models, GET /health, GET /get_server_info", r.Method, r.URL.Path)})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			writeError(w, refusal(http.StatusForbidden, "", "host_not_allowed",
				"Host %q is not a loopback name; start sim serve with --allow-host NAME to accept it", r.Host))
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !s.originAllowed(o) {
			writeError(w, refusal(http.StatusForbidden, "", "cross_origin",
				"cross-origin request from %q refused: the twin serves API clients, not web pages", o))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether host (a Host header, port optional) names
// this machine's loopback or one of Options.AllowedHosts. A request without
// a Host (HTTP/1.0) cannot come from a browser and is allowed.
func (s *Server) hostAllowed(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range s.opts.AllowedHosts {
		if strings.EqualFold(strings.Trim(a, "[]"), host) {
			return true
		}
	}
	return false
}

// originAllowed reports whether a browser Origin header names an allowed
// host ("null" and unparsable origins are not).
func (s *Server) originAllowed(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return s.hostAllowed(u.Host)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, want string) bool {
	if r.Method == want {
		return false
	}
	w.Header().Set("Allow", want)
	writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
		Message: fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, want)})
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if methodNotAllowed(w, r, http.MethodGet) {
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	writeJSON(w, struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", []model{{ID: s.opts.Model, Object: "model", Created: 0, OwnedBy: "kvcanary"}}})
}

// ServerInfo is the twin's GET /get_server_info (and /server_info): its
// real settings under SGLang's server-arg names where SGLang has one
// (disable_cuda_graph, cuda_graph_max_bs, disaggregation_mode,
// max_running_requests, max_total_num_tokens, random_seed), and under the
// twin's own where it has none (index_k_dtype, multi_stream_overlap — an
// environment variable in SGLang — and kvcanary_inject), so a client such
// as kvcanary repro records what the server runs instead of guessing.
func (s *Server) ServerInfo() map[string]any {
	c := s.opts.Config
	mode := "null" // SGLang's value without disaggregation
	if c.Disaggregation == "pd" {
		mode = "pd" // the twin runs both sides in one server
	}
	info := map[string]any{
		"model_path":             s.opts.Model,
		"served_model_name":      s.opts.Model,
		"disable_cuda_graph":     c.DisableCUDAGraph,
		"cuda_graph_max_bs":      c.CUDAGraphMaxBS,
		"disaggregation_mode":    mode,
		"max_running_requests":   c.MaxRunningRequests,
		"max_total_num_tokens":   c.PoolTokens,
		"random_seed":            c.Seed,
		"index_k_dtype":          c.IndexKDtype,
		"multi_stream_overlap":   c.MultiStreamOverlap,
		"kvcanary_inject":        strings.Join(c.Inject, ","),
		"speculative_eagle_topk": c.SpeculativeEagleTopK,
		"kvcanary_twin":          true,
	}
	return info
}

func (s *Server) handleServerInfo(w http.ResponseWriter, r *http.Request) {
	if methodNotAllowed(w, r, http.MethodGet) {
		return
	}
	writeJSON(w, s.ServerInfo())
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if methodNotAllowed(w, r, http.MethodGet) {
		return
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "server is shutting down"})
		return
	}
	writeJSON(w, map[string]string{"status": "ok"})
}

func (s *Server) handleDebug(w http.ResponseWriter, r *http.Request) {
	if methodNotAllowed(w, r, http.MethodGet) {
		return
	}
	recs := s.Records()
	dev, broken := 0, 0
	for _, r := range recs {
		if r.Deviated {
			dev++
		}
		if r.Broken {
			broken++
		}
	}
	s.mu.Lock()
	st, step := s.stats, s.stepNum
	s.mu.Unlock()
	writeJSON(w, map[string]any{"requests": recs, "deviated": dev, "broken": broken, "stats": st, "step": step, "pace": s.Pace()})
}

// expected returns the script round a request answers.
func expectedRound(sc sim.Script, toolRounds int, offered bool, round int) sim.ScriptRound {
	final := sc.Rounds[len(sc.Rounds)-1]
	if !offered || round >= toolRounds {
		return final
	}
	return sc.Rounds[round]
}

// script returns the session's script with exactly toolRounds tool rounds
// (−1: as the script says), calling only tools among offered (a request's
// tool names; none: any), cached.
func (s *Server) script(idx, toolRounds int, offered []string) (sim.Script, int) {
	key := scriptKey{idx, toolRounds, strings.Join(offered, ",")}
	s.mu.Lock()
	sc, ok := s.scripts[key]
	s.mu.Unlock()
	if !ok {
		if toolRounds < 0 {
			sc = sim.NewScript(s.opts.Config.Seed, idx, s.opts.Rounds)
		} else {
			// NewScript(…, T+2) has T..T+2 tool rounds: keep the first T and
			// the final answer.
			// A conversation may state up to 9999: past sim.MaxRounds the
			// context is long full, so the script stops there.
			toolRounds = min(toolRounds, sim.MaxRounds-2)
			base := sim.NewScript(s.opts.Config.Seed, idx, toolRounds+2)
			sc = sim.Script{Session: base.Session, Prefix: base.Prefix}
			sc.Rounds = append(append([]sim.ScriptRound(nil), base.Rounds[:toolRounds]...), base.Rounds[len(base.Rounds)-1])
		}
		if len(offered) > 0 {
			sc = sc.OfferedOnly(s.opts.Config.Seed, idx, offered)
		}
		s.mu.Lock()
		if len(s.scripts) > 4096 {
			clear(s.scripts)
		}
		s.scripts[key] = sc
		s.mu.Unlock()
	}
	return sc, len(sc.Rounds) - 1
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	if methodNotAllowed(w, r, http.MethodPost) {
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, refusal(http.StatusUnsupportedMediaType, "Content-Type", "unsupported_media_type",
			"Content-Type %q: want application/json", r.Header.Get("Content-Type")))
		return
	}
	// A body that does not arrive in time is refused rather than held: the
	// deadline covers the body only (ResponseController; a handler without
	// deadline support, such as a test recorder, reads without one).
	rc := http.NewResponseController(w)
	hasDeadline := rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout)) == nil
	req, aerr := decodeRequest(r.Body, s.opts.MaxBody)
	if hasDeadline {
		rc.SetReadDeadline(time.Time{})
	}
	if aerr != nil && errors.Is(aerr.cause, os.ErrDeadlineExceeded) {
		aerr = refusal(http.StatusRequestTimeout, "", "request_timeout", "request body not received within %v", s.opts.BodyTimeout)
		w.Header().Set("Connection", "close")
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	cv := parseConvo(req.Messages, req.texts)
	if cv.toolRounds > 64 {
		writeError(w, badRequest("messages", "invalid_value", "first user message: %s %d: want at most 64", ToolRoundsMarker, cv.toolRounds))
		return
	}
	idx := SessionIndex(cv.firstUser)
	offered := req.toolsOffered()
	var names []string
	if offered {
		for _, t := range req.Tools {
			names = append(names, t.Function.Name)
		}
	}
	sc, toolRounds := s.script(idx, cv.toolRounds, names)
	round := len(cv.turns)
	sr := expectedRound(sc, toolRounds, offered, round)

	// History: the server's own tokens where the client echoed them back.
	history := make([]sim.Turn, 0, len(cv.turns))
	reused := 0
	for i, t := range cv.turns {
		var out []sim.Token
		s.mu.Lock()
		so, ok := s.outputs[outputKey{sc.Session, i, signature(t.content, t.calls)}]
		s.mu.Unlock()
		if ok {
			out = so.tokens
			reused++
		} else {
			out = encodeTurn(s.vocab, t)
		}
		history = append(history, sim.Turn{Output: out, Result: s.vocab.Encode(strings.Join(t.results, "\n"))})
	}
	prompt, hint := sim.BuildPrompt(sc.Prefix, history, sr.Expected)
	maxNew := 0
	if req.MaxTokens != nil {
		maxNew = *req.MaxTokens
	}
	if req.MaxCompletionTokens != nil {
		maxNew = *req.MaxCompletionTokens
	}
	if maxNew > sim.DefaultMaxNewTokens {
		maxNew = sim.DefaultMaxNewTokens
	}
	if len(prompt)+max(maxNew, sim.DefaultMaxNewTokens) >= sim.ContextLen {
		writeError(w, badRequest("messages", "context_length_exceeded",
			"this conversation is %d tokens on the twin; its context holds %d including %d for the answer", len(prompt), sim.ContextLen, sim.DefaultMaxNewTokens))
		return
	}
	s.mu.Lock()
	s.seq++
	engID := fmt.Sprintf("%s-r%d-%d", sc.Session, round, s.seq)
	s.mu.Unlock()
	h, err := s.eng.Submit(sim.Request{ID: engID, Session: sc.Session, Round: round, Prompt: prompt, Hint: hint,
		Expected: sr.Expected, MaxNewTokens: maxNew})
	if err != nil {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: err.Error()})
		return
	}
	id := "chatcmpl-" + engID
	created := s.opts.Now().Unix()
	model := req.Model

	var sw *sseWriter
	if req.Stream {
		sw = newSSE(w, id, created, model)
		sw.send(openaiwire.Delta{Role: "assistant", Content: ptr("")}, nil)
	}
	select {
	case <-h.Done():
	case <-r.Context().Done():
		// The client left; the engine finishes the request anyway and the
		// record below keeps its ground truth.
		<-h.Done()
	}
	c := h.Result()
	text := s.vocab.DecodeValid(c.Tokens)
	parsed := sim.ParseDSML(text)
	rec := RequestRecord{ID: id, Session: sc.Session, Round: round, ExpectToolCall: sr.ToolCall, Deviated: c.Deviated,
		Leak: parsed.Leak, ToolCalls: len(parsed.ToolCalls), FinishReason: c.FinishReason, Stream: req.Stream,
		PromptTokens: len(prompt), CompletionTokens: len(c.Tokens), Retractions: c.Retractions, Step: c.Step, Reused: reused,
		Probe: r.Header.Get(openaiwire.ProbeHeader) != ""}
	if c.FinishReason == "abort" {
		rec.Reason = "request aborted by the engine: " + c.Err
	}
	rec.Broken = c.FinishReason == "abort" || parsed.Leak || (sr.ToolCall && len(parsed.ToolCalls) == 0)
	finish := sim.WireFinish(c.FinishReason, len(parsed.ToolCalls))
	if j := s.opts.Judge; j != nil && c.FinishReason != "abort" {
		mustCall := toolRounds
		if !offered {
			mustCall = 0
		}
		rec.Outcome = j(round, mustCall, parsed.Content, len(parsed.ToolCalls), finish)
		if rec.Outcome != "" && !hook.ValidOutcome(rec.Outcome) {
			// A judge's bug must not turn into session events the
			// event model refuses: the record keeps what it said, the
			// session counts it as an error.
			rec.JudgeError = fmt.Sprintf("judge returned outcome %q", rec.Outcome)
			rec.Outcome = hook.OutcomeError
		}
		if rec.Outcome == hook.OutcomeLeak || rec.Outcome == hook.OutcomeNoTool {
			rec.Excerpt = hook.Excerpt(parsed.Content)
		}
	}
	calls := make([]openaiwire.ToolCall, len(parsed.ToolCalls))
	for i, tc := range parsed.ToolCalls {
		calls[i].ID = fmt.Sprintf("call_%s_%d", engID, i)
		calls[i].Type = "function"
		calls[i].Function.Name = tc.Name
		calls[i].Function.Arguments = tc.Arguments
	}
	s.mu.Lock()
	s.records = append(s.records, rec)
	if len(s.outputs) > 1<<16 {
		clear(s.outputs)
	}
	s.outputs[outputKey{sc.Session, round, signature(parsed.Content, calls)}] = servedOutput{tokens: c.Tokens}
	s.mu.Unlock()

	u := openaiwire.Usage{PromptTokens: len(prompt), CompletionTokens: len(c.Tokens), TotalTokens: len(prompt) + len(c.Tokens)}
	if c.FinishReason == "abort" {
		e := &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: "request aborted by the engine: " + c.Err}
		if sw != nil {
			sw.sendError(e)
			sw.done()
			return
		}
		writeError(w, e)
		return
	}
	if sw != nil {
		s.stream(sw, parsed, calls, finish, u, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	msg := openaiwire.Message{Role: "assistant", ToolCalls: calls}
	if parsed.Content != "" || len(calls) == 0 {
		msg.Content = ptr(parsed.Content)
	}
	writeJSON(w, openaiwire.Response{ID: id, Object: "chat.completion", Created: created, Model: model,
		Choices: []openaiwire.Choice{{Index: 0, Message: msg, FinishReason: ptr(finish)}}, Usage: &u})
}

func ptr[T any](v T) *T { return &v }
