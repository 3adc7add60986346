package repro

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// Excerpt bounds a reply's text for keeping as evidence (hook.Excerpt).
func Excerpt(s string) string { return hook.Excerpt(s) }

// Redacted is the stand-in for a text a redacted bundle must not carry: its
// length and SHA-256, enough to tell two outputs apart or match one against
// a copy kept inside the building.
func Redacted(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "redacted: " + strconv.Itoa(len(s)) + " bytes, sha256 " + hex.EncodeToString(sum[:])
}

// redactedPrefix starts every text Redacted returns.
const redactedPrefix = "redacted: "

// keptReasons are reasons (or their prefixes) that the harness writes
// itself and that carry no prompt or reply text: a redacted bundle keeps
// them whole. Any other reason keeps its head up to the first ": " (the
// class of failure, "HTTP 400") and loses the rest (the server's message,
// which may quote the prompt).
var keptReasons = []string{"tool-call markup ", "no tool call (finish ", "malformed tool call (finish ",
	"request timed out", "aborted: ", "transport: "}

// RedactReason is a session reason as a redacted bundle keeps it.
func RedactReason(reason string) string {
	if reason == "" || strings.HasPrefix(reason, redactedPrefix) {
		return reason
	}
	for _, k := range keptReasons {
		if strings.HasPrefix(reason, k) {
			return reason
		}
	}
	head, rest, found := strings.Cut(reason, ": ")
	switch {
	case !found:
		return Redacted(reason)
	case strings.HasPrefix(rest, redactedPrefix):
		return reason // redacted already
	}
	return head + ": " + Redacted(rest)
}

// RedactSession replaces the prompt and reply text a session event carries
// (its excerpt; the part of its reason a server wrote) by lengths and
// digests. The outcome class, rounds, finish reasons and request ids stay,
// so every report on the bundle still works.
func RedactSession(s *hook.Session) {
	if s.Excerpt != "" && !strings.HasPrefix(s.Excerpt, redactedPrefix) {
		s.Excerpt = Redacted(s.Excerpt)
	}
	s.Reason = RedactReason(s.Reason)
}

// Redactor is a hook.Publisher that redacts session events (RedactSession)
// on their way to Next; other events pass unchanged. A session body is
// copied before it is changed, so other subscribers of the same event still
// see the text.
type Redactor struct{ Next hook.Publisher }

// Publish implements hook.Publisher.
func (r Redactor) Publish(ev hook.Event) {
	if s, ok := ev.Body.(*hook.Session); ok && s != nil {
		c := *s
		RedactSession(&c)
		ev.Body = &c
	}
	r.Next.Publish(ev)
}

// failedRound is the 1-based round that ended a session badly: the reply
// judged leak or no_tool (the last one answered), the request that failed
// (the one after), or 0 when the session ended well.
func failedRound(c outcome.Class, rounds int) int {
	switch c {
	case outcome.Leak, outcome.NoTool:
		return rounds
	case outcome.Error, outcome.Timeout:
		return rounds + 1
	}
	return 0
}

// SessionEvent is the session event of a finished harness session: its
// outcome, reason, the round that went wrong, its request ids and the
// bounded excerpt of the reply that ended it.
func SessionEvent(sr SessionResult) *hook.Session {
	return &hook.Session{ID: sr.ID, Outcome: sr.Outcome, Rounds: sr.Rounds, Reason: sr.Reason, FinishReasons: sr.FinishReasons,
		Loop: sr.Loop, Requests: sr.Requests, Round: failedRound(outcome.Class(sr.Outcome), sr.Rounds), Excerpt: Excerpt(sr.Output)}
}
