// Package safetext makes untrusted text (model output, log lines, names read
// from bundles) safe to print on a terminal. It has no dependencies beyond
// the standard library, so analyzers such as repro can use it without
// pulling in the CLI's.
package safetext
