// Package testenv holds the test helpers every kvcanary package shares: the
// skip-or-fail rule for tests that need something this machine may lack
// (root, kernel features, a tool such as tmux, promtool or chromium), and
// one poll-until-true wait for tests that watch another goroutine or
// process; a loopback address nothing listens on, and a buffer safe to read
// while written. (The twin served over HTTP for a test is
// runtime/sim/server/servertest.)
//
// Under KVCANARY_REQUIRE_PRIVILEGED=1 (set where the capability is known to
// exist, as in CI) a missing capability fails the test instead of skipping
// it, so a broken environment cannot pass by skipping (the idea of cilium/ebpf
// testutils.SkipIfNotSupported). The helpers report through testing.TB and
// never return an error.
package testenv
