// Package servertest serves the twin (runtime/sim/server) on a loopback
// httptest server for tests: the set-up the server's own tests, repro's
// harness tests and the CLI's tests share. It is imported by tests only.
//
// Errors: Start and Post fail the test (t.Fatal) when the server cannot be
// built or a request cannot be sent or read; nothing is returned to handle.
package servertest
