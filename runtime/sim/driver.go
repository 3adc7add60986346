package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

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
}

// DefaultWorkload is the seeds' reproducer shape: 80 sessions × 4 rounds.
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
	Output   string   `json:"last_output,omitempty"` // the output that ended a corrupted session
}

// Result is what a workload run measured.
type Result struct {
	Config            hook.RunConfig  `json:"config"`
	Sessions          int             `json:"sessions"`
	Rounds            int             `json:"rounds"`
	Outcomes          map[string]int  `json:"outcomes"`
	CorruptedSessions int             `json:"corrupted_sessions"`
	CorruptionRate    float64         `json:"corruption_rate"`
	Wilson95          [2]float64      `json:"wilson95"`
	Deviated          int             `json:"deviated_sessions"`
	Stats             Stats           `json:"stats"`
	WallSeconds       float64         `json:"wall_seconds"`
	PerSession        []SessionResult `json:"-"`
}

type session struct {
	script  Script
	round   int
	history []Turn
	next    uint64 // step to submit at
	h       *Handle
	res     SessionResult
	rng     *rand.Rand
	done    bool
}

// Corrupted reports whether an outcome counts as corruption.
func Corrupted(outcome string) bool {
	return outcome == hook.OutcomeLeak || outcome == hook.OutcomeNoTool || outcome == hook.OutcomeError
}

// Wilson95 is the 95% Wilson score interval of k successes in n trials.
func Wilson95(k, n int) [2]float64 {
	if n == 0 {
		return [2]float64{0, 1}
	}
	const z = 1.959963984540054
	p := float64(k) / float64(n)
	nf := float64(n)
	den := 1 + z*z/nf
	c := (p + z*z/(2*nf)) / den
	h := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / den
	return [2]float64{max(0, c-h), min(1, c+h)}
}

// Classify judges one round's output against what the round expects, the
// way the seeds' reproducer does: DSML left in content is a leak; a
// tool-call round without a tool call is no_tool; otherwise "" (the session
// goes on) or done for a plain-text answer where one was expected.
func Classify(expectToolCall bool, p Parsed) string {
	switch {
	case p.Leak:
		return hook.OutcomeLeak
	case expectToolCall && len(p.ToolCalls) == 0:
		return hook.OutcomeNoTool
	case !expectToolCall && len(p.ToolCalls) == 0:
		return hook.OutcomeDone
	}
	return ""
}

// Run drives the workload against a new engine with cfg and publishes the
// engine's events plus run.start, one session event per session and
// run.end to pub. The outcome is a pure function of cfg and w.
func Run(ctx context.Context, cfg Config, w Workload, pub hook.Publisher) (Result, error) {
	if w.Sessions < 1 || w.Rounds < 1 {
		return Result{}, fmt.Errorf("run workload: want at least 1 session and 1 round, got %d×%d", w.Sessions, w.Rounds)
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
	pub.Publish(hook.Event{Kind: hook.KindRunStart, TS: simEpoch.UnixNano(), Src: hook.Source{Proc: "sim"},
		Body: &hook.RunStart{Tool: w.Tool, Config: rc, Host: hook.HostInfo{OS: "sim", Arch: "twin"}}})
	e, err := NewEngine(cfg, pub)
	if err != nil {
		return Result{}, err
	}
	sess := make([]*session, w.Sessions)
	for i := range sess {
		if i%256 == 0 {
			// Building scripts is O(sessions); stay responsive to Ctrl-C.
			if err := ctx.Err(); err != nil {
				return Result{}, fmt.Errorf("run workload: %w", err)
			}
		}
		s := &session{script: NewScript(cfg.Seed, i, w.Rounds), rng: rand.New(rand.NewPCG(cfg.Seed, 0x7ec4+uint64(i)))}
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
				Deviated: s.res.Deviated, Requests: s.res.Requests}})
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
			sr := s.script.Rounds[min(s.round, len(s.script.Rounds)-1)]
			outcome := Classify(sr.ToolCall, ParseDSML(c.Text))
			if c.FinishReason == "abort" {
				outcome = hook.OutcomeError
			}
			if outcome != "" {
				if Corrupted(outcome) {
					s.res.Output = c.Text
				}
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
	res.CorruptedSessions = res.Outcomes[hook.OutcomeLeak] + res.Outcomes[hook.OutcomeNoTool] + res.Outcomes[hook.OutcomeError]
	res.CorruptionRate = float64(res.CorruptedSessions) / float64(w.Sessions)
	res.Wilson95 = Wilson95(res.CorruptedSessions, w.Sessions)
	res.WallSeconds = time.Since(start).Seconds()
	pub.Publish(hook.Event{Kind: hook.KindRunEnd, TS: e.Now().UnixNano(), Src: hook.Source{Proc: "sim"},
		Body: &hook.RunEnd{WallNS: int64(time.Since(start)), Steps: int64(res.Stats.Steps)}})
	return res, nil
}
