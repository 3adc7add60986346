package repro

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func TestExcerptBounds(t *testing.T) {
	if got := Excerpt("short <tool_call>"); got != "short <tool_call>" {
		t.Errorf("a short reply changed: %q", got)
	}
	long := strings.Repeat("ж", 3000) // 6000 bytes of 2-byte runes
	got := Excerpt(long)
	if len(got) > hook.MaxExcerpt || !utf8.ValidString(got) {
		t.Fatalf("excerpt %d bytes, valid UTF-8 %v; want ≤ %d and valid", len(got), utf8.ValidString(got), hook.MaxExcerpt)
	}
	if !strings.HasSuffix(got, "… [6000 bytes in all]") || !strings.HasPrefix(got, "жжж") {
		t.Errorf("excerpt does not mark its cut: …%q", got[len(got)-40:])
	}
	if got := Excerpt("a\xffb"); got != "a\uFFFDb" {
		t.Errorf("invalid UTF-8 kept: %q", got)
	}
}

func TestRedactSession(t *testing.T) {
	s := &hook.Session{ID: "s001", Outcome: hook.OutcomeError, Rounds: 1, Reason: "HTTP 400: your prompt 'SECRET TASK' is too long",
		Requests: []string{"req-1"}, Round: 2, Excerpt: "SECRET OUTPUT <tool_call>"}
	RedactSession(s)
	if strings.Contains(s.Reason, "SECRET") || strings.Contains(s.Excerpt, "SECRET") {
		t.Fatalf("text left after redaction: %+v", s)
	}
	if !strings.HasPrefix(s.Reason, "HTTP 400: redacted: 37 bytes, sha256 ") {
		t.Errorf("reason %q: want the class kept and the server's text digested", s.Reason)
	}
	if s.Excerpt != Redacted("SECRET OUTPUT <tool_call>") || !strings.HasPrefix(s.Excerpt, "redacted: 25 bytes, sha256 ") {
		t.Errorf("excerpt %q", s.Excerpt)
	}
	if s.Outcome != hook.OutcomeError || s.Round != 2 || s.Requests[0] != "req-1" {
		t.Errorf("redaction lost the outcome, round or request ids: %+v", s)
	}
	again := *s
	RedactSession(&again)
	if again.Excerpt != s.Excerpt || again.Reason != s.Reason {
		t.Errorf("redacting twice digests the digest: %+v", again)
	}
	for _, r := range []string{"tool-call markup <tool_call> in content", "no tool call (finish stop)", "request timed out after 2s"} {
		if got := RedactReason(r); got != r {
			t.Errorf("harness reason %q became %q", r, got)
		}
	}
}

func TestRedactorCopiesTheBody(t *testing.T) {
	orig := &hook.Session{ID: "s", Outcome: hook.OutcomeLeak, Excerpt: "plain text"}
	var got hook.Event
	Redactor{Next: hook.PublishFunc(func(ev hook.Event) { got = ev })}.Publish(hook.Event{Kind: hook.KindSession, Body: orig})
	if orig.Excerpt != "plain text" {
		t.Errorf("the redactor changed the caller's body: %q", orig.Excerpt)
	}
	if s := got.Body.(*hook.Session); !strings.HasPrefix(s.Excerpt, "redacted: 10 bytes") {
		t.Errorf("published excerpt %q", s.Excerpt)
	}
}

func TestSessionEventRound(t *testing.T) {
	for _, tc := range []struct {
		outcome      string
		rounds, want int
	}{{hook.OutcomeLeak, 3, 3}, {hook.OutcomeNoTool, 1, 1}, {hook.OutcomeError, 0, 1}, {hook.OutcomeTimeout, 2, 3}, {hook.OutcomeDone, 2, 0}, {hook.OutcomeMaxRounds, 4, 0}} {
		ev := SessionEvent(SessionResult{ID: "s", Outcome: tc.outcome, Rounds: tc.rounds, Reason: "why", Output: "out"})
		if ev.Round != tc.want || ev.Reason != "why" || ev.Excerpt != "out" {
			t.Errorf("%s after %d rounds: %+v, want round %d", tc.outcome, tc.rounds, ev, tc.want)
		}
	}
}
