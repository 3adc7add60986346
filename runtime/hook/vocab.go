package hook

import "fmt"

// The event model's fixed vocabularies as named types, each with its set, a
// Valid and a Parse. The body fields keep their JSON (strings); these types
// are what code that reads or writes them compares against. Session outcome
// classes are spec/outcome.Class; canary phases are spec/pagediff.Phase.

// Sides lists the checksum sides.
func Sides() []Side { return []Side{SidePrefill, SideDecode} }

// Valid reports whether s is prefill or decode.
func (s Side) Valid() bool { return s == SidePrefill || s == SideDecode }

// ParseSide returns the side named text, or an error naming text.
func ParseSide(text string) (Side, error) {
	return parseWord[Side](text, "side", "prefill or decode")
}

// Severities lists the finding severities, least to most severe.
func Severities() []Severity { return []Severity{SevInfo, SevWarn, SevError} }

// Valid reports whether s is info, warn or error.
func (s Severity) Valid() bool { return s == SevInfo || s == SevWarn || s == SevError }

// ParseSeverity returns the severity named text, or an error naming text.
func ParseSeverity(text string) (Severity, error) {
	return parseWord[Severity](text, "severity", "info, warn or error")
}

// ReplayMode is how a decode step ran (Replay.Mode): a graph replay or an
// eager step.
type ReplayMode string

// Replay modes, typed (ModeGraph and ModeEager are their strings).
const (
	ReplayGraph ReplayMode = ModeGraph
	ReplayEager ReplayMode = ModeEager
)

// ReplayModes lists the replay modes.
func ReplayModes() []ReplayMode { return []ReplayMode{ReplayGraph, ReplayEager} }

// Valid reports whether m is graph or eager.
func (m ReplayMode) Valid() bool { return m == ReplayGraph || m == ReplayEager }

// ParseReplayMode returns the mode named text, or an error naming text.
func ParseReplayMode(text string) (ReplayMode, error) {
	return parseWord[ReplayMode](text, "replay mode", "graph or eager")
}

// parseWord returns text as a T when it is one of T's words, or an error
// naming text, what a T is and want, the words.
func parseWord[T interface {
	~string
	Valid() bool
}](text, what, want string) (T, error) {
	if w := T(text); w.Valid() {
		return w, nil
	}
	return "", fmt.Errorf("parse %s %q: want %s", what, text, want)
}
