// Package pagediff is the canary's page-diff spec, the part a source computes
// exactly as the canary analyzer expects (canary/SPEC.md): which pages to
// digest around a replay (Policy: live, all or sweep:N), how the before and
// after digest arrays are compared (Diff), and the phases of an observation
// (Phase: replay, between).
//
// It is a spec leaf: it judges nothing and imports no kvcanary package, so a
// source (the twin, an engine hook) may import it without reaching the
// canary analyzer.
//
// Error contract: Diff and Policy never fail and never panic on any input
// (out-of-range pages are dropped, never indexed). ParsePolicy and ParsePhase
// return errors naming the offending text.
package pagediff
