// Package safetext makes untrusted text (model output, log lines, names read
// from bundles) safe to print on a terminal. It has no dependencies beyond
// the standard library, so sources, analyzers and sinks (repro, sessions,
// tui) can use it without pulling in the CLI's. It is the one home of
// terminal quoting; cmdutil.Quote forwards here.
package safetext
