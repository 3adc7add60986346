package server_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/runtime/sim/server/servertest"
)

type judgeCall struct {
	round, toolRounds, toolCalls int
	finish                       string
}

// The server observes; outcomes come from Options.Judge. Each reply is
// judged as a client sees it (round, the rounds that must call a tool, tool
// calls, the wire finish reason), the judge's verdicts become the session
// events Close publishes, and without a judge Close publishes none.
func TestSessionOutcomesComeFromTheJudge(t *testing.T) {
	var (
		mu    sync.Mutex
		calls []judgeCall
	)
	judge := func(round, toolRounds int, content string, toolCalls int, finish string) string {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, judgeCall{round, toolRounds, toolCalls, finish})
		if toolCalls == 0 {
			return hook.OutcomeLeak // a verdict the twin without overlap never earns: it must come from here
		}
		return ""
	}
	for _, withJudge := range []bool{true, false} {
		calls = nil
		var evs []hook.Event
		var evMu sync.Mutex
		opts := server.Options{Publisher: hook.PublishFunc(func(ev hook.Event) {
			if ev.Kind == hook.KindSession {
				evMu.Lock()
				evs = append(evs, ev)
				evMu.Unlock()
			}
		})}
		if withJudge {
			opts.Judge = judge
		}
		tw := startQuiet(t, opts)
		// Session A is offered tools and must call one (tool rounds: 1);
		// session B is offered none, so its plain answer is the final one.
		servertest.Post(t, tw.URL, `{"model":"m","messages":[{"role":"user","content":"task A; tool rounds: 1"}],"tools":`+servertest.ToolsJSON+`}`)
		servertest.Post(t, tw.URL, `{"model":"m","messages":[{"role":"user","content":"task B"}]}`)
		tw.Stop()
		s := tw.Server

		if !withJudge {
			if len(evs) != 0 || len(calls) != 0 {
				t.Fatalf("without a judge: %d session events, %d judge calls; want none", len(evs), len(calls))
			}
			for _, r := range s.Records() {
				if r.Outcome != "" {
					t.Fatalf("without a judge a record has outcome %q", r.Outcome)
				}
			}
			continue
		}
		if len(calls) != 2 {
			t.Fatalf("judge called %d times, want 2: %+v", len(calls), calls)
		}
		got := map[string]string{}
		for _, ev := range evs {
			ss := ev.Body.(*hook.Session)
			got[ss.ID] = ss.Outcome
			if err := ev.Validate(); err != nil {
				t.Fatalf("published an invalid session event: %v", err)
			}
		}
		recs := s.Records()
		if len(recs) != 2 || len(got) != 2 {
			t.Fatalf("records %+v, sessions %v", recs, got)
		}
		for i, r := range recs {
			c := calls[i]
			switch {
			case r.ExpectToolCall:
				if c.round != 0 || c.toolRounds != 1 || c.toolCalls != 1 || c.finish != "tool_calls" {
					t.Errorf("tool round judged as %+v", c)
				}
				if r.Outcome != "" || got[r.Session] != hook.OutcomeMaxRounds {
					t.Errorf("session %s after a tool call: record %q, session %q; want \"\" and maxrounds", r.Session, r.Outcome, got[r.Session])
				}
			default:
				if c.toolRounds != 0 || c.toolCalls != 0 || c.finish != "stop" {
					t.Errorf("plain round judged as %+v", c)
				}
				if r.Outcome != hook.OutcomeLeak || got[r.Session] != hook.OutcomeLeak {
					t.Errorf("session %s: record %q, session %q; want the judge's leak", r.Session, r.Outcome, got[r.Session])
				}
			}
		}
	}
}

// A judge that answers outside hook.Outcomes cannot make the server publish
// a session event the event model refuses: the record says what the judge
// returned and the session counts as an error.
func TestBadVerdictIsRecordedNotPublished(t *testing.T) {
	var evs []hook.Event
	var mu sync.Mutex
	tw := startQuiet(t, server.Options{Judge: func(int, int, string, int, string) string { return "lek" },
		Publisher: hook.PublishFunc(func(ev hook.Event) {
			mu.Lock()
			evs = append(evs, ev)
			mu.Unlock()
		})})
	servertest.Post(t, tw.URL, `{"model":"m","messages":[{"role":"user","content":"task C"}]}`)
	tw.Stop()
	recs := tw.Server.Records()
	if len(recs) != 1 || recs[0].Outcome != hook.OutcomeError || !strings.Contains(recs[0].JudgeError, `"lek"`) {
		t.Fatalf("records %+v, want outcome error with the judge's answer recorded", recs)
	}
	var sessions int
	for _, ev := range evs {
		if err := ev.Validate(); err != nil {
			t.Fatalf("published an invalid event: %v", err)
		}
		if ev.Kind == hook.KindSession {
			sessions++
		}
	}
	if sessions != 1 {
		t.Fatalf("%d session events, want 1", sessions)
	}
}
