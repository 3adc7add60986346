// Package archtest holds kvcanary's architecture test: the one-way import
// rule of DESIGN.md (sources → bus → analyzers → sinks) checked on every
// package's imports, read by parsing every .go file of the module whatever
// its build constraints (go list sees only this platform's), and the
// one-package entry of each third-party library, test files included. The package has no code of its own; the rule and its
// layer table are in arch_test.go, and `go test ./internal/archtest` fails
// with a message naming each offending package and import.
package archtest
