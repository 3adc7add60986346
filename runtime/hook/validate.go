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
	if err := validateSource(e.Kind, e.Src); err != nil {
		return err
	}
	return validateBody(e.Body)
}

// validateSource checks the envelope's src: role is empty, prefill or
// decode; rank is not negative and set only with a role.
func validateSource(k Kind, s Source) error {
	switch s.Role {
	case "", "prefill", "decode":
	default:
		return &valueError{k, "src role", quoteValue(s.Role) + " is not one of " + strings.Join(Roles, "|") + " (or empty)"}
	}
	if s.Rank < 0 {
		return &valueError{k, "src rank", strconv.FormatInt(int64(s.Rank), 10) + " is negative"}
	}
	if s.Rank != 0 && s.Role == "" {
		return &valueError{k, "src rank", strconv.FormatInt(int64(s.Rank), 10) + " is set without a role"}
	}
	return nil
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
	stages     = []string{`""`, StageSent, StageTransferred, StageAdmitted}
	phases     = []string{`""`, PhaseReplay, PhaseBetween}
)

// Checksum stages: where on its side a room digest was taken
// (checksum/SPEC.md §9). "" is unstated.
const (
	StageSent        = "sent"        // prefill, after the last chunk was handed to the transfer
	StageTransferred = "transferred" // decode, as the transferred bytes landed
	StageAdmitted    = "admitted"    // decode, just before the first decode step
)

// Canary phases: what a canary.pages event's before/after digests bracket
// (canary/SPEC.md §7). "" means PhaseReplay.
const (
	PhaseReplay  = "replay"  // one decode step
	PhaseBetween = "between" // from the previous check's after-snapshot to this step's before-snapshot
)

// Graphdiff sources: what a graphdiff.sample's vectors are. "" is the index
// logits over cached positions; SourceIndexerTopK followed by a layer id
// ("indexer_topk.12") is the sparse indexer's selections at that layer.
const (
	SourceNextTokenLogits = "next_token_logits"
	SourceIndexerTopK     = "indexer_topk."
)

// ParseGraphDiffSource splits a graphdiff.sample source into its name and,
// for "indexer_topk.L", the layer id L (-1 otherwise). It refuses anything
// else: the names above, and a layer id in canonical decimal (no sign, no
// leading zero) below 2^31.
func ParseGraphDiffSource(s string) (name string, layer int, err error) {
	switch {
	case s == "" || s == SourceNextTokenLogits:
		return s, -1, nil
	case strings.HasPrefix(s, SourceIndexerTopK):
		d := s[len(SourceIndexerTopK):]
		ok := len(d) > 0 && len(d) <= 10 && (d[0] != '0' || len(d) == 1)
		for i := 0; ok && i < len(d); i++ {
			ok = d[i] >= '0' && d[i] <= '9'
		}
		if ok {
			if v, perr := strconv.ParseInt(d, 10, 32); perr == nil {
				return SourceIndexerTopK[:len(SourceIndexerTopK)-1], int(v), nil
			}
		}
	}
	return "", -1, fmt.Errorf("%s is not one of \"\"|%s|%sL (L a layer id)", quoteValue(s), SourceNextTokenLogits, SourceIndexerTopK)
}

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
	if b.Round < 0 {
		return negative(KindSession, "round", int64(b.Round))
	}
	if len(b.Excerpt) > MaxExcerpt {
		return &valueError{KindSession, "excerpt", fmt.Sprintf("is %d bytes, over the %d-byte bound", len(b.Excerpt), MaxExcerpt)}
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
	if b.Rank < 0 {
		return negative(KindRoomChecksum, "rank", int64(b.Rank))
	}
	switch b.Stage {
	case "", StageSent, StageTransferred, StageAdmitted:
	default:
		return notOneOf(KindRoomChecksum, "stage", b.Stage, stages)
	}
	for i, l := range b.Layers {
		if l < 0 {
			return &valueError{KindRoomChecksum, "layers", fmt.Sprintf("entry %d is %d; layer ids are 0 or more", i, l)}
		}
		if i > 0 && l <= b.Layers[i-1] {
			return &valueError{KindRoomChecksum, "layers", fmt.Sprintf(
				"entry %d is %d after %d; layer ids must be strictly ascending", i, l, b.Layers[i-1])}
		}
	}
	if len(b.LayerBsum) != len(b.Layers) {
		return &valueError{KindRoomChecksum, "layer_bsum", fmt.Sprintf(
			"has %d entries and layers %d; it is parallel to layers", len(b.LayerBsum), len(b.Layers))}
	}
	if n := len(b.PageBsum); n > 0 {
		if want := (b.SeqLen + 63) / 64; n != want {
			return &valueError{KindRoomChecksum, "page_bsum", fmt.Sprintf(
				"has %d entries; seq_len %d occupies %d page-table entries (64 tokens each), one digest per entry", n, b.SeqLen, want)}
		}
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
	switch b.Phase {
	case "", PhaseReplay, PhaseBetween:
	default:
		return notOneOf(KindCanaryPages, "phase", b.Phase, phases)
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
	if b.Source != "" && b.Source != SourceNextTokenLogits {
		if _, _, err := ParseGraphDiffSource(b.Source); err != nil {
			return &valueError{KindGraphDiffSample, "source", err.Error()}
		}
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
