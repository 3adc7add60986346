package pagediff

import "fmt"

// Phase is the phase of a canary.pages observation (hook.CanaryPages.Phase,
// canary/SPEC.md §7).
type Phase string

// Phases, the fixed set.
const (
	PhaseReplay  Phase = "replay"  // before/after one decode step ("" on the wire means the same)
	PhaseBetween Phase = "between" // the previous check's after-snapshot to this step's before-snapshot
)

// Valid reports whether p is one of the phases, "" (replay) included.
func (p Phase) Valid() bool {
	switch p {
	case "", PhaseReplay, PhaseBetween:
		return true
	}
	return false
}

// ParsePhase parses a wire phase: "" and "replay" are PhaseReplay,
// "between" is PhaseBetween; anything else is an error naming it.
func ParsePhase(s string) (Phase, error) {
	switch Phase(s) {
	case "", PhaseReplay:
		return PhaseReplay, nil
	case PhaseBetween:
		return PhaseBetween, nil
	}
	return "", fmt.Errorf("parse canary phase %q: want replay or between", s)
}
