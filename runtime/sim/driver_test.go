package sim

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// TestRunNeedsJudge: the twin does not judge, so a workload without a judge
// is refused before anything runs.
func TestRunNeedsJudge(t *testing.T) {
	w := DefaultWorkload()
	w.Sessions, w.Rounds = 2, 1
	var c collect
	_, err := Run(context.Background(), quietConfig(1), w, &c)
	if err == nil || !strings.Contains(err.Error(), "run workload: no judge") {
		t.Fatalf("err %v, want run workload: no judge", err)
	}
	if len(c.evs) != 0 {
		t.Fatalf("published %d events without a judge", len(c.evs))
	}
}

// judgeCall is one call of a recording judge.
type judgeCall struct {
	round, toolRounds int
	content           string
	toolCalls         int
	finish            string
}

// TestRunAsksTheJudge: Run hands the judge the round, the script's tool
// rounds and the reply as the server's parser splits it, and ends a session
// exactly when the judge says so, with the judge's outcome.
func TestRunAsksTheJudge(t *testing.T) {
	sessions, rounds := 6, 3
	if small() {
		// Two full runs were minutes under -race; the judge's contract is
		// the same for 3 sessions of 2 rounds.
		sessions, rounds = 3, 2
	}
	cfg := quietConfig(3)
	t.Run("ends at once", func(t *testing.T) {
		var calls []judgeCall
		w := DefaultWorkload()
		w.Sessions, w.Rounds = sessions, rounds
		w.Judge = func(round, toolRounds int, content string, toolCalls int, finish string) string {
			calls = append(calls, judgeCall{round, toolRounds, content, toolCalls, finish})
			return hook.OutcomeDone
		}
		var c collect
		res, err := Run(context.Background(), cfg, w, &c)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcomes[hook.OutcomeDone] != sessions || len(calls) != sessions {
			t.Fatalf("outcomes %v after %d judge calls, want %d done", res.Outcomes, len(calls), sessions)
		}
		bySession := map[string]SessionResult{}
		for _, s := range res.PerSession {
			bySession[s.ID] = s
		}
		// A session ends in the step its judge call happens, so the i-th
		// session event follows the i-th call.
		i := 0
		for _, ev := range c.evs {
			se, ok := ev.Body.(*hook.Session)
			if !ok {
				continue
			}
			idx, err := strconv.Atoi(strings.TrimPrefix(se.ID, "s"))
			if err != nil {
				t.Fatalf("session id %q", se.ID)
			}
			got, sr := calls[i], bySession[se.ID]
			p := ParseDSML(sr.Output)
			want := judgeCall{0, toolRounds(NewScript(cfg.Seed, idx, rounds)), p.Content, len(p.ToolCalls), WireFinish(sr.Finish[0], len(p.ToolCalls))}
			if got != want {
				t.Errorf("session %s: judge saw %+v, want %+v", se.ID, got, want)
			}
			if want.toolRounds < 1 || want.toolRounds > rounds || sr.Output == "" || se.Outcome != hook.OutcomeDone || se.Rounds != 1 {
				t.Errorf("session %s: tool rounds %d, output %q, event %+v", se.ID, want.toolRounds, sr.Output, se)
			}
			i++
		}
		if i != sessions {
			t.Fatalf("%d session events, want %d", i, sessions)
		}
	})
	t.Run("never ends", func(t *testing.T) {
		perRound := map[int]int{}
		w := DefaultWorkload()
		w.Sessions, w.Rounds = sessions, rounds
		w.Judge = func(round, toolRounds int, content string, toolCalls int, finish string) string {
			perRound[round]++
			return ""
		}
		res, err := Run(context.Background(), cfg, w, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcomes[hook.OutcomeMaxRounds] != sessions {
			t.Fatalf("outcomes %v, want %d maxrounds", res.Outcomes, sessions)
		}
		for r := range rounds {
			if perRound[r] != sessions {
				t.Errorf("round %d judged %d times, want %d (%v)", r, perRound[r], sessions, perRound)
			}
		}
		for _, s := range res.PerSession {
			if s.Rounds != rounds || s.Output == "" {
				t.Errorf("session %s: %d rounds, last output %q", s.ID, s.Rounds, s.Output)
			}
		}
	})
}

// TestToolRounds: a script is its tool-call rounds, then one plain-text
// answer.
func TestToolRounds(t *testing.T) {
	for rounds := 1; rounds <= 6; rounds++ {
		for i := range 20 {
			s := NewScript(1, i, rounds)
			n := toolRounds(s)
			if n < 1 || n != len(s.Rounds)-1 || s.Rounds[n].ToolCall {
				t.Fatalf("rounds %d session %d: toolRounds %d of %d script rounds", rounds, i, n, len(s.Rounds))
			}
		}
	}
	if n := toolRounds(Script{}); n != 0 {
		t.Fatalf("empty script: %d tool rounds", n)
	}
}

// TestRunJudgeSeesWireFinishAndMustAnswerInContract: the judge sees the
// finish reason a client would ("tool_calls" after tool calls, as sim serve
// says), and a verdict outside hook.Outcomes stops the run with an error
// naming it rather than turning into events the event model refuses.
func TestRunJudgeSeesWireFinishAndMustAnswerInContract(t *testing.T) {
	w := DefaultWorkload()
	w.Sessions, w.Rounds = 4, 2
	if small() {
		w.Sessions = 2 // the judge's view of each reply is the same; a minute less under -race
	}
	var calls []judgeCall
	w.Judge = func(round, toolRounds int, content string, toolCalls int, finish string) string {
		calls = append(calls, judgeCall{round, toolRounds, content, toolCalls, finish})
		return ""
	}
	if _, err := Run(context.Background(), quietConfig(5), w, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		if want := WireFinish("stop", c.toolCalls); c.toolCalls > 0 && c.finish != want || c.finish == "" {
			t.Fatalf("judge saw finish %q with %d tool calls", c.finish, c.toolCalls)
		}
	}
	if len(calls) == 0 || calls[0].toolCalls == 0 || calls[0].finish != "tool_calls" {
		t.Fatalf("first reply judged as %+v, want a tool call with finish tool_calls", calls)
	}

	w.Judge = func(int, int, string, int, string) string { return "lek" }
	var c collect
	_, err := Run(context.Background(), quietConfig(5), w, &c)
	if err == nil || !strings.Contains(err.Error(), `outcome "lek"`) || !strings.Contains(err.Error(), "no_tool") {
		t.Fatalf("a judge answering %q: err %v, want one naming the outcome and the allowed ones", "lek", err)
	}
	for _, ev := range c.evs {
		if err := ev.Validate(); err != nil {
			t.Fatalf("published an invalid event: %v", err)
		}
	}
}

func TestWireFinish(t *testing.T) {
	for _, tc := range []struct {
		engine string
		calls  int
		want   string
	}{{"stop", 1, "tool_calls"}, {"stop", 0, "stop"}, {"length", 2, "length"}, {"abort", 1, "abort"}} {
		if got := WireFinish(tc.engine, tc.calls); got != tc.want {
			t.Errorf("WireFinish(%q, %d) = %q, want %q", tc.engine, tc.calls, got, tc.want)
		}
	}
}
