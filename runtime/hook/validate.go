package hook

import (
	"fmt"
	"strconv"
	"strings"
)

// Body values the event model allows.
//
// The decoders check structure (JSON syntax, UTF-8, lengths, finite floats);
// the methods here check values against the fixed contracts of the event
// model: enumerations (session outcome, checksum side, replay mode, finding
// severity), counts, sizes and durations that cannot be negative, and lists
// documented as parallel. Free text, identifiers, timestamps, measurements
// and configuration echoed from an engine are not constrained. WIRE.md
// ("Values") lists every rule.
//
// One mechanism serves every path: a body type with constraints implements
// validator, and validateBody is the one place that asks. The frame decoder,
// both JSON-lines paths (the fast path gives up on an invalid body so the
// slow path reports it), Event.UnmarshalJSON, AppendFrame/AppendFrameJSON,
// Event.MarshalJSON (and so the Emitter) and Event.Validate all call it, so
// what an encoder writes a decoder reads, and nothing else.

// validator is implemented by body types whose values are constrained.
type validator interface {
	validate() error
}

// validateBody checks b's values; bodies without constraints pass.
func validateBody(b Body) error {
	if v, ok := b.(validator); ok {
		return v.validate()
	}
	return nil
}

// Validate reports whether e is an event the event model allows: a v1 kind,
// a body of that kind, and body values within the contract (a session
// outcome from Outcomes, a checksum side prefill or decode, a replay mode
// graph or eager, a finding severity info, warn or error, no negative
// counts, …). Decoders reject, and encoders and the Emitter refuse, exactly
// the events it rejects; the encoders additionally refuse invalid UTF-8 and
// non-finite floats, which Validate does not check.
func (e Event) Validate() error {
	if !e.Kind.Valid() {
		return fmt.Errorf("invalid kind %d", e.Kind)
	}
	if e.Body == nil || isNilBody(e.Body) {
		return fmt.Errorf("%s event has no body", e.Kind)
	}
	if e.Body.Kind() != e.Kind {
		return fmt.Errorf("kind %s with a %s body", e.Kind, e.Body.Kind())
	}
	return validateBody(e.Body)
}

// valueError is a body value the event model does not allow. Its message
// names the kind, the field (by its JSON name) and the value:
// `session outcome "lek" is not one of done|maxrounds|leak|no_tool|error|timeout`.
type valueError struct {
	kind  Kind
	field string
	msg   string
}

func (e *valueError) Error() string { return e.kind.String() + " " + e.field + " " + e.msg }

// quoteValue quotes an untrusted string for an error message, cut to a
// readable length.
func quoteValue(s string) string { return strconv.Quote(truncate(s, 64)) }

func notOneOf(k Kind, field, v string, allowed []string) error {
	return &valueError{k, field, quoteValue(v) + " is not one of " + strings.Join(allowed, "|")}
}

func negative(k Kind, field string, v int64) error {
	return &valueError{k, field, strconv.FormatInt(v, 10) + " is negative"}
}

// Allowed values of the enumerated fields, in the order error messages list
// them.
var (
	sides      = []string{string(SidePrefill), string(SideDecode)}
	modes      = []string{ModeGraph, ModeEager}
	severities = []string{string(SevInfo), string(SevWarn), string(SevError)}
)

// Replay modes.
const (
	ModeGraph = "graph" // a captured CUDA graph was replayed
	ModeEager = "eager" // the step ran eagerly (no graph, or bs above cuda-graph-max-bs)
)

// ValidOutcome reports whether s is one of Outcomes (a switch, not a search
// of the exported slice: callers cannot change what is valid).
func ValidOutcome(s string) bool {
	switch s {
	case OutcomeDone, OutcomeMaxRounds, OutcomeLeak, OutcomeNoTool, OutcomeError, OutcomeTimeout:
		return true
	}
	return false
}

func (b *Session) validate() error {
	if !ValidOutcome(b.Outcome) {
		return notOneOf(KindSession, "outcome", b.Outcome,
			[]string{OutcomeDone, OutcomeMaxRounds, OutcomeLeak, OutcomeNoTool, OutcomeError, OutcomeTimeout})
	}
	if b.Rounds < 0 {
		return negative(KindSession, "rounds", int64(b.Rounds))
	}
	return nil
}

func (b *RoomChecksum) validate() error {
	if b.Side != SidePrefill && b.Side != SideDecode {
		return notOneOf(KindRoomChecksum, "side", string(b.Side), sides)
	}
	if b.SeqLen < 0 {
		return negative(KindRoomChecksum, "seq_len", int64(b.SeqLen))
	}
	if b.Pages < 0 {
		return negative(KindRoomChecksum, "pages", int64(b.Pages))
	}
	return nil
}

func (b *Replay) validate() error {
	if b.Mode != ModeGraph && b.Mode != ModeEager {
		return notOneOf(KindReplay, "mode", b.Mode, modes)
	}
	switch {
	case b.BatchSize < 0:
		return negative(KindReplay, "bs", int64(b.BatchSize))
	case b.Bucket < 0:
		return negative(KindReplay, "bucket", int64(b.Bucket))
	case b.DurNS < 0:
		return negative(KindReplay, "dur_ns", b.DurNS)
	}
	return nil
}

func (b *RunEnd) validate() error {
	switch {
	case b.WallNS < 0:
		return negative(KindRunEnd, "wall_ns", b.WallNS)
	case b.Steps < 0:
		return negative(KindRunEnd, "steps", b.Steps)
	}
	return nil
}

func (b *CanaryPages) validate() error {
	switch {
	case b.PagesTotal < 0:
		return negative(KindCanaryPages, "pages_total", int64(b.PagesTotal))
	case b.PagesChecked < 0:
		return negative(KindCanaryPages, "pages_checked", int64(b.PagesChecked))
	case b.LivePages < 0:
		return negative(KindCanaryPages, "live_pages", int64(b.LivePages))
	case b.LiveChecked < 0:
		return negative(KindCanaryPages, "live_checked", int64(b.LiveChecked))
	}
	if len(b.ExpectedOwner) > 0 && len(b.ExpectedOwner) != len(b.Expected) {
		return &valueError{KindCanaryPages, "expected_owner", fmt.Sprintf(
			"has %d entries and expected %d; it must be empty or parallel to expected", len(b.ExpectedOwner), len(b.Expected))}
	}
	return nil
}

func (b *GraphDiffSample) validate() error {
	switch {
	case b.K < 0:
		return negative(KindGraphDiffSample, "k", int64(b.K))
	case b.SeqLen < 0:
		return negative(KindGraphDiffSample, "seq_len", int64(b.SeqLen))
	}
	return nil
}

func (b *Sched) validate() error {
	switch {
	case b.RunningReq < 0:
		return negative(KindSched, "running_req", int64(b.RunningReq))
	case b.QueueReq < 0:
		return negative(KindSched, "queue_req", int64(b.QueueReq))
	case b.Tokens < 0:
		return negative(KindSched, "tokens", int64(b.Tokens))
	case b.Retracted < 0:
		return negative(KindSched, "retracted", int64(b.Retracted))
	}
	return nil
}

func (b *Finding) validate() error {
	switch b.Severity {
	case SevInfo, SevWarn, SevError:
		return nil
	}
	return notOneOf(KindFinding, "severity", string(b.Severity), severities)
}
