package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Judge decides a session's fate from what a client sees of round round's
// reply (0-based) in a session whose first toolRounds rounds must call a
// tool: an outcome that ends the session (hook.OutcomeLeak, OutcomeNoTool,
// OutcomeDone, …) or "" when the session goes on. outcome.Classifier.Outcome is one.
type Judge func(round, toolRounds int, content string, toolCalls int, finish string) string

// Workload describes the deterministic multi-turn tool-calling sessions of
// `sim run`: every session starts at once, like the seeds' reproducer.
type Workload struct {
	Sessions int
	Rounds   int
	ThinkMin int // client-side tool execution time in engine steps
	ThinkMax int
	MaxSteps uint64 // safety bound; 0 = 400000
	Tool     string // tool version for run.start
	Progress func(finished, total int)
	// Judge classifies every reply; required. The twin only observes: it
	// parses a reply the way the server's tool-call parser does and hands
	// the parts to Judge.
	Judge Judge
}

// ToolTime is the workload's think time as the wall time of the engine's
// simulated steps, in repro's --tool-time form ("1.5s-6s"), so a sim run and
// an HTTP run against sim serve record the same client behaviour.
func (w Workload) ToolTime() string {
	lo, hi := time.Duration(w.ThinkMin)*StepTime, time.Duration(w.ThinkMax)*StepTime
	if lo == hi {
		return lo.String()
	}
	return lo.String() + "-" + hi.String()
}

// DefaultWorkload is the seeds' reproducer shape: 80 sessions × 4 rounds.
// It has no Judge: the caller sets one.
func DefaultWorkload() Workload {
	return Workload{Sessions: 80, Rounds: 4, ThinkMin: 60, ThinkMax: 240}
}

// SessionResult is one session's outcome.
type SessionResult struct {
	ID       string   `json:"id"`
	Outcome  string   `json:"outcome"`
	Rounds   int      `json:"rounds"`
	Deviated bool     `json:"deviated"`
	Requests []string `json:"requests"`
	Finish   []string `json:"finish_reasons"`
	Output   string   `json:"last_output,omitempty"` // the session's last output (or why its request was refused)
}

// Result is what a workload run measured: the outcome counts the judge
// decided, nothing derived from them (rates and intervals are the
// analyzers', e.g. outcome.SummaryOf).
type Result struct {
	Config      hook.RunConfig  `json:"config"`
	Sessions    int             `json:"sessions"`
	Rounds      int             `json:"rounds"`
	Outcomes    map[string]int  `json:"outcomes"`
	Deviated    int             `json:"deviated_sessions"`
	Stats       Stats           `json:"stats"`
	WallSeconds float64         `json:"wall_seconds"`
	PerSession  []SessionResult `json:"-"`
}

type session struct {
	script     Script
	toolRounds int // leading tool-call rounds of script
	round      int
	history    []Turn
	next       uint64 // step to submit at
	h          *Handle
	res        SessionResult
	rng        *rand.Rand
	done       bool
	// What the session event says about a corrupted end, as repro's do:
	// the round (1-based) that went wrong, the reply's content
	// (hook.Excerpt-bounded) or why the request failed.
	badRound        int
	excerpt, reason string
}

// toolRounds counts the leading tool-call rounds of s: the rounds a
// session must answer with a tool call.
func toolRounds(s Script) int {
	n := 0
	for n < len(s.Rounds) && s.Rounds[n].ToolCall {
		n++
	}
	return n
}

// Run drives the workload against a new engine with cfg and publishes the
// engine's events plus run.start, one session event per session and
// run.end to pub. w.Judge decides every session's outcome from the parsed
// replies; the outcome is a pure function of cfg, w and the judge.
func Run(ctx context.Context, cfg Config, w Workload, pub hook.Publisher) (Result, error) {
	if w.Judge == nil {
		return Result{}, fmt.Errorf("run workload: no judge: set Workload.Judge (e.g. outcome.Classifier{}.Outcome)")
	}
	if w.Sessions < 1 || w.Rounds < 1 {
		return Result{}, fmt.Errorf("run workload: want at least 1 session and 1 round, got %d×%d", w.Sessions, w.Rounds)
	}
	if w.Rounds > MaxRounds {
		return Result{}, fmt.Errorf("run workload: %d rounds: at most %d (the context is full by about the 17th)", w.Rounds, MaxRounds)
	}
	if w.ThinkMax < w.ThinkMin || w.ThinkMin < 0 {
		return Result{}, fmt.Errorf("run workload: think time %d..%d", w.ThinkMin, w.ThinkMax)
	}
	if pub == nil {
		pub = hook.PublishFunc(func(hook.Event) {})
	}
	start := time.Now()
	rc := cfg.RunConfig()
	rc.Sessions, rc.Rounds, rc.Concurrency = w.Sessions, w.Rounds, w.Sessions
	rc.ToolTime = w.ToolTime()
	pub.Publish(hook.Event{Kind: hook.KindRunStart, TS: simEpoch.UnixNano(), Src: hook.Source{Proc: "sim"},
		Body: &hook.RunStart{Tool: w.Tool, Config: rc, Host: hook.HostInfo{OS: "sim", Arch: "twin"}}})
	e, err := NewEngine(cfg, pub)
	if err != nil {
		return Result{}, err
	}
	sess := make([]*session, w.Sessions)
	for i := range sess {
		if i%16 == 0 {
			// Building scripts takes up to ~20 ms a session; stay
			// responsive to Ctrl-C.
			if err := ctx.Err(); err != nil {
				return Result{}, fmt.Errorf("run workload: %w", err)
			}
		}
		s := &session{script: NewScript(cfg.Seed, i, w.Rounds), rng: rand.New(rand.NewPCG(cfg.Seed, 0x7ec4+uint64(i)))}
		s.toolRounds = toolRounds(s.script)
		s.res.ID = s.script.Session
		sess[i] = s
	}
	res := Result{Config: rc, Sessions: w.Sessions, Rounds: w.Rounds, Outcomes: map[string]int{}}
	for _, o := range hook.Outcomes {
		res.Outcomes[o] = 0
	}
	finished := 0
	end := func(s *session, outcome string) {
		s.done = true
		s.res.Outcome = outcome
		res.Outcomes[outcome]++
		finished++
		if w.Progress != nil {
			w.Progress(finished, w.Sessions)
		}
		pub.Publish(hook.Event{Kind: hook.KindSession, TS: e.Now().UnixNano(), Src: hook.Source{Proc: "sim"},
			Body: &hook.Session{ID: s.res.ID, Outcome: outcome, Rounds: s.res.Rounds, FinishReasons: s.res.Finish,
				Deviated: s.res.Deviated, Requests: s.res.Requests, Round: s.badRound, Excerpt: s.excerpt, Reason: s.reason}})
	}
	byReq := map[string]*session{}
	maxSteps := w.MaxSteps
	if maxSteps == 0 {
		maxSteps = 400000
	}
	for finished < w.Sessions {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("run workload: %w", err)
		}
		if e.StepNumber() >= maxSteps {
			return res, fmt.Errorf("run workload: no progress after %d steps", maxSteps)
		}
		for i, s := range sess {
			if i%256 == 255 && ctx.Err() != nil {
				break // the loop's head returns the error after this step
			}
			if s.done || s.h != nil || s.next > e.StepNumber() {
				continue
			}
			sr := s.script.Rounds[min(s.round, len(s.script.Rounds)-1)]
			prompt, hint := BuildPrompt(s.script.Prefix, s.history, sr.Expected)
			id := fmt.Sprintf("%s-r%d", s.res.ID, s.round)
			h, err := e.Submit(Request{ID: id, Session: s.res.ID, Round: s.round, Prompt: prompt, Hint: hint, Expected: sr.Expected})
			if err != nil {
				s.res.Output = err.Error()
				s.badRound, s.reason = s.round+1, "request refused by the engine: "+err.Error()
				end(s, hook.OutcomeError)
				continue
			}
			s.h = h
			s.res.Requests = append(s.res.Requests, id)
			byReq[id] = s
		}
		for _, c := range e.Step() {
			s := byReq[c.ID]
			if s == nil {
				continue
			}
			delete(byReq, c.ID)
			s.h = nil
			s.res.Rounds++
			s.res.Finish = append(s.res.Finish, c.FinishReason)
			s.res.Deviated = s.res.Deviated || c.Deviated
			s.res.Output = c.Text
			sr := s.script.Rounds[min(s.round, len(s.script.Rounds)-1)]
			var outcome string
			if c.FinishReason == "abort" {
				// The engine gave up on the request: a failed request, not a
				// reply to judge. The HTTP harness classifies its failed
				// requests (transport, HTTP status, unreadable body) as
				// error itself before its classifier sees a reply; so does
				// the twin.
				outcome = hook.OutcomeError
				s.badRound, s.reason = s.round+1, "request aborted by the engine: "+c.Err
			} else {
				// What a client sees: the server's tool-call parser splits
				// the text into content and tool calls.
				p := ParseDSML(c.Text)
				outcome = w.Judge(s.round, s.toolRounds, p.Content, len(p.ToolCalls), WireFinish(c.FinishReason, len(p.ToolCalls)))
				if outcome != "" && !hook.ValidOutcome(outcome) {
					return res, fmt.Errorf("run workload: the judge returned outcome %q for session %s round %d: want \"\" or one of %s",
						outcome, s.res.ID, s.round, strings.Join(hook.Outcomes, ", "))
				}
				if outcome == hook.OutcomeLeak || outcome == hook.OutcomeNoTool {
					s.badRound, s.excerpt = s.round+1, hook.Excerpt(p.Content)
				}
			}
			if outcome != "" {
				end(s, outcome)
				continue
			}
			result := sr.Result
			if !sr.ToolCall {
				result = s.script.Rounds[0].Result
			}
			s.history = append(s.history, Turn{Output: c.Tokens, Result: result})
			s.round++
			if s.round >= w.Rounds {
				end(s, hook.OutcomeMaxRounds)
				continue
			}
			s.next = e.StepNumber() + uint64(w.ThinkMin+s.rng.IntN(w.ThinkMax-w.ThinkMin+1))
		}
	}
	res.Stats = e.Stats()
	for _, s := range sess {
		res.PerSession = append(res.PerSession, s.res)
		if s.res.Deviated {
			res.Deviated++
		}
	}
	res.WallSeconds = time.Since(start).Seconds()
	pub.Publish(hook.Event{Kind: hook.KindRunEnd, TS: e.Now().UnixNano(), Src: hook.Source{Proc: "sim"},
		Body: &hook.RunEnd{WallNS: int64(time.Since(start)), Steps: int64(res.Stats.Steps)}})
	return res, nil
}
