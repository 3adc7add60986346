package repro

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// HarnessOptions configure RunHarness.
type HarnessOptions struct {
	URL         string        // server base URL (http://host:port, …/v1 or …/v1/chat/completions)
	Model       string        // "" asks GET /v1/models for the first id ("default" when that fails)
	Sessions    int           // sessions to run (default 80)
	Rounds      int           // most rounds per session (default 4)
	Concurrency int           // sessions in flight at once (default Sessions)
	Timeout     time.Duration // per request (default 120s); a request that takes longer is a timeout
	Stream      bool          // ask for server-sent events
	Seed        uint64        // picks the tasks and each session's tool rounds
	MaxTokens   int           // max_tokens sent with every request; 0 sends none
	// MaxResponseBytes bounds the bytes read of one response, JSON body or
	// event stream (default DefaultMaxResponseBytes). A response over it
	// ends its session as error, so a server streaming garbage costs each
	// session in flight about this much memory, not unbounded amounts.
	MaxResponseBytes int
	// ToolTime is the client's tool execution time: after a round's tool
	// calls, a session waits ToolTime.Delay(Seed, session, round) before
	// sending the results. Zero answers at once.
	ToolTime   ToolTime
	Classifier outcome.Classifier
	Client     *http.Client   // nil: a keep-alive client sized for Concurrency
	Publisher  hook.Publisher // run.start, one session event per session, run.end; nil: none
	Progress   func(finished, total int)
	// OnSession, when set, sees every finished session with its index
	// (the order sessions were started in), one call at a time.
	OnSession func(i int, sr SessionResult)
	Tool      string        // tool version for run.start
	Host      hook.HostInfo // host facts for run.start
	Run       string        // run id put on every event published ("": none)

	// APIKey, when set, is sent as "Authorization: Bearer <key>" with every
	// request (models, preflight probe, chat). It is never published,
	// printed or recorded; reasons that echo it have it replaced.
	APIKey string
	// Headers are extra request headers sent with every request. Their
	// values are never published or recorded (WorkloadExtra lists names).
	Headers http.Header
	// Sampling are the sampling settings sent with every chat request.
	Sampling Sampling
	// Conversations, when set, replace the synthetic tasks: session i
	// replays Conversations[i % len(Conversations)] (see ReadConversations).
	Conversations []Conversation
	// ConversationsName names the conversations' source (a file path) in
	// WorkloadExtra, with ConversationsDigest (hex SHA-256 of its bytes).
	ConversationsName, ConversationsDigest string

	ownClient bool // Client was made here: close its connections at the end
}

// ToolTime is a range of client-side tool execution times. Agentic clients
// run their tools between rounds, which spreads sessions out in time; a
// harness that answers at once keeps N sessions in lock-step, so the server
// sees batches no real workload makes.
type ToolTime struct {
	Min, Max time.Duration
}

// DefaultToolTime is kvcanary repro's tool time: 1.5–6 s, which on the twin
// server (sim serve paces an engine step to 25 ms) is the 60–240 steps of
// sim run's think time, and on a GPU server a few hundred decode steps, the
// order of the seeds' agentic sessions' tool rounds.
var DefaultToolTime = ToolTime{Min: 1500 * time.Millisecond, Max: 6 * time.Second}

// ParseToolTime reads "MIN-MAX" ("1.5s-6s") or one duration ("2s", "0"),
// Go duration syntax.
func ParseToolTime(s string) (ToolTime, error) {
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		hi = lo
	}
	var t ToolTime
	var err error
	if t.Min, err = parseNonNegDuration(lo); err != nil {
		return ToolTime{}, fmt.Errorf("tool time %q: %w", s, err)
	}
	if t.Max, err = parseNonNegDuration(hi); err != nil {
		return ToolTime{}, fmt.Errorf("tool time %q: %w", s, err)
	}
	if t.Max < t.Min {
		return ToolTime{}, fmt.Errorf("tool time %q: maximum %v below minimum %v", s, t.Max, t.Min)
	}
	return t, nil
}

func parseNonNegDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("want MIN-MAX or one duration, e.g. 1.5s-6s")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %v", d)
	}
	return d, nil
}

// String is the form ParseToolTime reads.
func (t ToolTime) String() string {
	if t.Min == t.Max {
		return t.Min.String()
	}
	return t.Min.String() + "-" + t.Max.String()
}

// IsZero reports whether tools answer at once.
func (t ToolTime) IsZero() bool { return t.Max <= 0 }

// Delay is the tool time of session i's round: uniform in [Min, Max],
// a pure function of seed, i and round.
func (t ToolTime) Delay(seed uint64, i, round int) time.Duration {
	if t.Max <= t.Min {
		return max(t.Min, 0)
	}
	span := uint64(t.Max - t.Min)
	return t.Min + time.Duration(mix64(seed^0x7001, uint64(i)<<16|uint64(round&0xffff))%(span+1))
}

func (t ToolTime) validate() error {
	if t.Min < 0 || t.Max < t.Min {
		return fmt.Errorf("tool time %v..%v: want 0 <= min <= max", t.Min, t.Max)
	}
	return nil
}

// SessionResult is one harness session.
type SessionResult struct {
	ID            string   `json:"id"`
	Outcome       string   `json:"outcome"`     // an outcome.Class
	Rounds        int      `json:"rounds"`      // requests answered
	ToolRounds    int      `json:"tool_rounds"` // rounds that had to call a tool
	FinishReasons []string `json:"finish_reasons"`
	Requests      []string `json:"requests"` // response ids
	Reason        string   `json:"reason,omitempty"`
	Loop          bool     `json:"loop,omitempty"`
	Output        string   `json:"last_output,omitempty"` // the output that ended a corrupted session (Excerpt-bounded)
	// Failure classifies the request that ended the session without an
	// answer (RequestError*); "" when every request was answered.
	Failure string `json:"failure,omitempty"`
}

// How a request failed, by who is to blame: SessionResult.Failure and the
// keys of HarnessResult.FailedRequests.
const (
	FailureHTTP5xx   = "http_5xx"  // the server answered with a 5xx status: a loud server error
	FailureTransport = "transport" // no answer: connection refused or reset, EOF mid-answer
	FailureHTTP4xx   = "http_4xx"  // the server refused the request (429s retried are not failures)
	FailureTimeout   = "timeout"   // no answer within --timeout
	FailureOther     = "other"     // an answer that is not an OpenAI response (HTML, unreadable JSON, over the size cap)
)

// ServerFailure reports whether a failure is the server's doing, loudly:
// an HTTP 5xx or no answer at all. Such sessions count as error in the rate
// (its definition does not change with the cause), and the report says how
// many there were beside it: they are not the silent corruption the rate is
// after.
func ServerFailure(f string) bool { return f == FailureHTTP5xx || f == FailureTransport }

// HarnessResult is a harness run: the Summary contract plus extras.
type HarnessResult struct {
	outcome.Summary
	URL         string `json:"url"`
	Model       string `json:"model"`
	Concurrency int    `json:"concurrency"`
	Requests    int    `json:"requests"` // sent: answered, and failed without an answer
	// FailedRequests counts the requests that got no answer, by
	// SessionResult.Failure class; empty when every request was answered.
	FailedRequests map[string]int `json:"failed_requests,omitempty"`
	// ServerErrors counts the sessions that ended in a server failure
	// (ServerFailure): they are among the error outcomes.
	ServerErrors  int            `json:"server_error_sessions,omitempty"`
	ToolTime      string         `json:"tool_time"` // client-side tool execution time per round ("0s": none)
	FinishReasons map[string]int `json:"finish_reasons"`
	Loops         int            `json:"loops"`
	// Aborted sessions were cut by the run's end (Ctrl-C, a deadline) before
	// they finished: their outcome is unknown, so they are not counted,
	// published or listed.
	Aborted int `json:"aborted,omitempty"`
	// ServerLost, when set, says how the server went away mid-run: a session
	// failed in transport and the server then answered nothing. The sessions
	// that failed with it and those still running are Aborted, not counted:
	// a dead server is not a corrupted one.
	ServerLost string `json:"server_lost,omitempty"`
	// Throttled sessions had a request the server kept refusing with 429
	// (past the retries): no answer, so no outcome; not counted, published
	// or listed.
	Throttled  int             `json:"throttled,omitempty"`
	PerSession []SessionResult `json:"per_session,omitempty"`
}

// Corrupted returns the ids of the corrupted sessions.
func (r *HarnessResult) Corrupted() []string {
	var out []string
	for _, s := range r.PerSession {
		if outcome.IsCorrupted(s.Outcome) {
			out = append(out, s.ID)
		}
	}
	return out
}

// ChatEndpoint returns the chat completions URL of a server URL, or an error
// naming what is wrong with it.
func ChatEndpoint(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("parse url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("url %q: want an http:// or https:// URL", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("url %q: no host", raw)
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
	case strings.HasSuffix(p, "/v1"):
		p += "/chat/completions"
	default:
		p += "/v1/chat/completions"
	}
	u.Path = p
	return u.String(), nil
}

// ToolRoundsFor is how many rounds of session i must call a tool: 1..rounds,
// spread like the twin's scripts (rounds-2 .. rounds, at least 1), so some
// sessions can answer within the rounds (done) and some cannot (maxrounds).
func ToolRoundsFor(seed uint64, i, rounds int) int {
	return max(1, rounds-2+int(mix64(seed, uint64(i))%3))
}

func mix64(a, b uint64) uint64 {
	h := fnv.New64a()
	var buf [16]byte
	for k := 0; k < 8; k++ {
		buf[k], buf[8+k] = byte(a>>(8*k)), byte(b>>(8*k))
	}
	h.Write(buf[:])
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

func (o *HarnessOptions) defaults() error {
	if o.Sessions == 0 {
		o.Sessions = 80
	}
	if o.Rounds == 0 {
		o.Rounds = 4
	}
	if o.Concurrency == 0 {
		o.Concurrency = o.Sessions
	}
	if o.Timeout == 0 {
		o.Timeout = 120 * time.Second
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	switch {
	case o.Sessions < 1:
		return fmt.Errorf("sessions %d: want at least 1", o.Sessions)
	case o.Rounds < 1:
		return fmt.Errorf("rounds %d: want at least 1", o.Rounds)
	case o.Concurrency < 1:
		return fmt.Errorf("concurrency %d: want at least 1", o.Concurrency)
	case o.Timeout < 0:
		return fmt.Errorf("timeout %v: want a positive duration", o.Timeout)
	case o.MaxResponseBytes < 1024:
		return fmt.Errorf("max response bytes %d: want at least 1024", o.MaxResponseBytes)
	}
	if err := o.Sampling.validate(); err != nil {
		return err
	}
	if err := o.ToolTime.validate(); err != nil {
		return err
	}
	if o.Client == nil {
		o.Client = NewHarnessClient(o.Concurrency)
		o.ownClient = true
	}
	if o.Publisher == nil {
		o.Publisher = hook.PublishFunc(func(hook.Event) {})
	}
	return nil
}

// NewHarnessClient returns an HTTP client that keeps a connection per
// concurrent session alive and sets no overall timeout (the harness bounds
// each request itself).
func NewHarnessClient(concurrency int) *http.Client {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        concurrency + 16,
		MaxIdleConnsPerHost: concurrency + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr}
}

// RunHarness drives opts.Sessions multi-turn tool-calling sessions at the
// server, at most opts.Concurrency at once, and classifies each. Server and
// transport failures are outcomes, never errors: the error is for invalid
// options. When ctx ends, unfinished sessions are classified error (aborted)
// and the partial result is returned with ctx's error. When the server goes
// away (a session fails in transport and GET /v1/models then gets no answer
// either), the run stops there: the partial result is returned with an
// ErrServerLost error, and the sessions cut by it are Aborted.
func RunHarness(ctx context.Context, opts HarnessOptions) (*HarnessResult, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("run harness: %w", err)
	}
	endpoint, err := ChatEndpoint(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("run harness: %w", err)
	}
	start := time.Now()
	if opts.Model == "" {
		opts.Model = discoverModel(ctx, opts.Client, endpoint, min(opts.Timeout, 10*time.Second), &opts) // with the run's key and headers
	}
	pub := hook.WithRun(opts.Publisher, opts.Run)
	pub.Publish(hook.Event{Kind: hook.KindRunStart, TS: start.UnixNano(), Src: hook.Source{Proc: "repro"},
		Body: &hook.RunStart{Tool: opts.Tool, Host: opts.Host, Config: hook.RunConfig{Engine: "remote", URL: opts.URL, Model: opts.Model,
			Sessions: opts.Sessions, Rounds: opts.Rounds, Concurrency: opts.Concurrency, Seed: opts.Seed,
			ToolTime: opts.ToolTime.String(), Extra: opts.WorkloadExtra()}}})

	d := &driver{opts: &opts, endpoint: endpoint, tools: toolsJSON()}
	if err := d.prepareConversations(); err != nil {
		return nil, fmt.Errorf("run harness: %w", err)
	}
	res := &HarnessResult{URL: opts.URL, Model: opts.Model, Concurrency: opts.Concurrency, ToolTime: opts.ToolTime.String(), FinishReasons: map[string]int{},
		PerSession: make([]SessionResult, opts.Sessions)}
	var mu sync.Mutex
	var outcomes outcome.Counts
	counted := make([]bool, opts.Sessions)
	finished := 0
	next := make(chan int)
	var wg sync.WaitGroup
	ctx, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	for range min(opts.Concurrency, opts.Sessions) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sr := d.session(ctx, i)
				if mayBeLost(sr) && ctx.Err() == nil {
					if err := d.serverGone(ctx); err != nil {
						lose(&ServerLostError{Session: sr.ID, Reason: opts.scrub(sr.Reason), Probe: opts.scrub(err.Error())})
					}
				}
				mu.Lock()
				// Every request sent counts, also those of sessions not
				// counted below (throttled, cut short).
				res.Requests += len(sr.Requests)
				for _, f := range sr.FinishReasons {
					res.FinishReasons[f]++
				}
				if sr.Failure != "" {
					res.Requests++
					if res.FailedRequests == nil {
						res.FailedRequests = map[string]int{}
					}
					res.FailedRequests[sr.Failure]++
				}
				if sr.Outcome == hook.OutcomeError && strings.HasPrefix(sr.Reason, errThrottled.Error()+": ") {
					res.Throttled++
					mu.Unlock()
					continue
				}
				if ctx.Err() != nil && sr.Outcome == hook.OutcomeError {
					// Cut by the run's end (Ctrl-C, a deadline) or the
					// server's: an error now says nothing about the server.
					res.Aborted++
					mu.Unlock()
					continue
				}
				res.PerSession[i], counted[i] = sr, true
				outcomes.Add(sr.Outcome)
				if ServerFailure(sr.Failure) && sr.Outcome == hook.OutcomeError {
					res.ServerErrors++
				}
				if sr.Loop {
					res.Loops++
				}
				finished++
				sr.Reason = opts.scrub(sr.Reason)
				res.PerSession[i].Reason = sr.Reason
				pub.Publish(hook.Event{Kind: hook.KindSession, TS: time.Now().UnixNano(), Src: hook.Source{Proc: "repro"},
					Body: SessionEvent(sr)})
				if opts.Progress != nil {
					opts.Progress(finished, opts.Sessions)
				}
				if opts.OnSession != nil {
					opts.OnSession(i, res.PerSession[i])
				}
				mu.Unlock()
			}
		}()
	}
	for i := range opts.Sessions {
		next <- i
	}
	close(next)
	wg.Wait()
	if opts.ownClient {
		opts.Client.CloseIdleConnections()
	}
	wall := time.Since(start)
	kept := res.PerSession[:0] // the aborted and the never started go
	for i, s := range res.PerSession {
		if counted[i] {
			kept = append(kept, s)
		}
	}
	res.PerSession = kept
	res.Summary = outcome.SummaryOf(outcomes, opts.Rounds, wall)
	end := &hook.RunEnd{WallNS: int64(wall)}
	err = ctx.Err()
	if cause := context.Cause(ctx); errors.Is(cause, ErrServerLost) {
		err, res.ServerLost = cause, cause.Error()
	}
	if err != nil {
		end.Error = err.Error()
	}
	pub.Publish(hook.Event{Kind: hook.KindRunEnd, TS: time.Now().UnixNano(), Src: hook.Source{Proc: "repro"}, Body: end})
	if err != nil {
		return res, fmt.Errorf("run harness: %w", err)
	}
	return res, nil
}

// ErrServerLost marks a run stopped because the server went away.
var ErrServerLost = errors.New("the server stopped answering")

// ServerLostError says which session's failure found the server gone, and
// what the probe after it got. Reason and Probe are Go error text, which
// may quote bytes the server sent (a malformed response).
type ServerLostError struct {
	Session string // the session whose transport failure started the probe
	Reason  string // that failure
	Probe   string // what GET /v1/models got, the last of lostProbes tries
}

func (e *ServerLostError) Error() string {
	return fmt.Sprintf("the server stopped answering: session %s failed (%s) and GET /v1/models got no answer (%s)", e.Session, e.Reason, e.Probe)
}

// Is makes errors.Is(err, ErrServerLost) hold.
func (e *ServerLostError) Is(target error) bool { return target == ErrServerLost }

// mayBeLost reports whether a session's failure could be its server going
// away — any error but an abort: a refused or reset connection, a stream
// cut short (a server killed mid-stream), a gateway's 502 for a dead
// backend. The probe decides; on a live server the error stands.
func mayBeLost(sr SessionResult) bool {
	return sr.Outcome == hook.OutcomeError && !strings.HasPrefix(sr.Reason, "aborted") && !strings.HasPrefix(sr.Reason, errThrottled.Error())
}

// lostProbes tries of GET /v1/models, lostProbeEvery apart, must all get no
// answer before the server counts as gone: one reset connection on a live
// server stays the session's error outcome.
const (
	lostProbes     = 3
	lostProbeEvery = 500 * time.Millisecond
)

// serverGone asks GET /v1/models (with the run's key and headers) whether
// the server still answers, and returns the last failure when no try got an
// answer. Any HTTP status is an answer (401, 404, 500: a server is there)
// except a gateway's 502, 503 and 504, which is what a proxy says for a
// backend that is gone. Nil when ctx ends first (the run's end is not the
// server's) and when this side is out of sockets (EMFILE and the like: the
// client failed, not the server).
func (d *driver) serverGone(ctx context.Context) error {
	u := strings.TrimSuffix(d.endpoint, "/chat/completions") + "/models"
	timeout := min(d.opts.Timeout, 10*time.Second)
	var last error
	for try := range lostProbes {
		if try > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(lostProbeEvery):
			}
		}
		last = d.probeModels(ctx, u, timeout)
		if last == nil || ctx.Err() != nil || clientSide(last) {
			return nil
		}
	}
	return last
}

func (d *driver) probeModels(ctx context.Context, u string, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	d.opts.setHeaders(req)
	resp, err := d.opts.Client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return fmt.Errorf("GET %s answered HTTP %d, a gateway's answer for a backend that is gone", u, resp.StatusCode)
	}
	return nil
}

// clientSide reports whether err is this process running out of sockets or
// ports, not the server failing to answer.
func clientSide(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENOBUFS)
}

// errTimeout marks a request that ran past the per-request timeout.
var errTimeout = errors.New("request timed out")
