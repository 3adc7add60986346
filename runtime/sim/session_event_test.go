package sim

import (
	"context"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// A corrupted session's event names the round that broke and keeps the
// reply's content, as repro's do: the dashboard shows the twin's sessions
// with their round, request and excerpt instead of "no excerpt kept".
func TestSessionEventNamesTheBrokenRound(t *testing.T) {
	w := DefaultWorkload()
	w.Sessions, w.Rounds = 3, 3
	w.Judge = func(round, toolRounds int, content string, toolCalls int, finish string) string {
		if round == 1 {
			return hook.OutcomeNoTool // the judge's verdict decides, whatever the twin said
		}
		return ""
	}
	var c collect
	res, err := Run(context.Background(), quietConfig(2), w, &c)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range c.evs {
		se, ok := ev.Body.(*hook.Session)
		if !ok {
			continue
		}
		n++
		var out string
		for _, s := range res.PerSession {
			if s.ID == se.ID {
				out = ParseDSML(s.Output).Content
			}
		}
		if se.Outcome != hook.OutcomeNoTool || se.Round != 2 || len(se.Requests) != 2 || se.Requests[1] != se.ID+"-r1" ||
			se.Excerpt != hook.Excerpt(out) || se.Excerpt == "" {
			t.Errorf("session event %+v; want no_tool at round 2, request %s-r1, excerpt the reply's content %q", se, se.ID, out)
		}
	}
	if n != 3 {
		t.Fatalf("%d session events, want 3", n)
	}
}
