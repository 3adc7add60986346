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
// The per-field rules (enumerations, minimums, bounds) are `check` tags in
// event.go, generated into validate_gen.go; the cross-field rules are the
// validateMore methods below. One mechanism serves every path: a body type
// with constraints implements validator, and validateBody is the one place that asks. The frame decoder,
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

// outOfRange is a number below its field's minimum (check:"min=N").
func outOfRange(k Kind, field string, v, min int64) error {
	if min == 0 {
		return &valueError{k, field, strconv.FormatInt(v, 10) + " is negative"}
	}
	return &valueError{k, field, strconv.FormatInt(v, 10) + " is below " + strconv.FormatInt(min, 10)}
}

// tooLong is a string over its field's bound (check:"maxlen=CONST").
func tooLong(k Kind, field string, n, max int) error {
	return &valueError{k, field, fmt.Sprintf("is %d bytes, over the %d-byte bound", n, max)}
}

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

// validateMore checks RoomChecksum's cross-field rules (its per-field
// rules are generated into validate_gen.go).
func (b *RoomChecksum) validateMore() error {
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

// validateMore checks CanaryPages' cross-field rules.
func (b *CanaryPages) validateMore() error {
	if len(b.ExpectedOwner) > 0 && len(b.ExpectedOwner) != len(b.Expected) {
		return &valueError{KindCanaryPages, "expected_owner", fmt.Sprintf(
			"has %d entries and expected %d; it must be empty or parallel to expected", len(b.ExpectedOwner), len(b.Expected))}
	}
	return nil
}

// validateMore checks GraphDiffSample's source grammar.
func (b *GraphDiffSample) validateMore() error {
	if b.Source != "" && b.Source != SourceNextTokenLogits {
		if _, _, err := ParseGraphDiffSource(b.Source); err != nil {
			return &valueError{KindGraphDiffSample, "source", err.Error()}
		}
	}
	return nil
}
