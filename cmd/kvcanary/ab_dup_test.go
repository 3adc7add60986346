package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// Issue 27 D8: a bundle whose session events were doubled (what `trace merge
// a a` wrote before it refused) is refused by ab, which counted 4/20
// sessions instead of 2/10 and narrowed the interval falsely.
func TestABRefusesDoubledSessions(t *testing.T) {
	sessionsOf := func(n, bad int) []hook.Event {
		var evs []hook.Event
		for i := range n {
			o := hook.OutcomeDone
			if i < bad {
				o = hook.OutcomeLeak
			}
			evs = append(evs, hook.Event{Kind: hook.KindSession, Body: &hook.Session{ID: fmt.Sprintf("s%03d", i), Outcome: o, Rounds: 4}})
		}
		return evs
	}
	once := sessionsOf(10, 2)
	a := writeBundle(t, traces.Manifest{Run: "a"}, append(append([]hook.Event(nil), once...), once...)...)
	b := writeBundle(t, traces.Manifest{Run: "b"}, sessionsOf(10, 0)...)
	_, _, err := runCmd(NewCmdAB, a, b)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), "10 session events repeat an id") {
		t.Fatalf("ab over a doubled bundle: %v (exit %d), want it refused (exit 3)", err, cmdutil.ExitCode(err))
	}
	if _, _, err := runCmd(NewCmdAB, writeBundle(t, traces.Manifest{Run: "a"}, once...), b); cmdutil.ExitCode(err) == cmdutil.ExitInput {
		t.Fatalf("ab over distinct sessions: %v", err)
	}
}
