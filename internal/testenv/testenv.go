package testenv

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns the skips of this
// package into failures.
const RequireEnv = "KVCANARY_REQUIRE_PRIVILEGED"

// Required reports whether RequireEnv promises every capability.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// SkipOrFail skips t with reason, or fails it when RequireEnv says the
// capability is known to exist here. It does not return.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s=1 but %s", RequireEnv, reason)
	}
	t.Skip(reason)
}

// LookTool returns the path of the program name, or skips (fails under
// RequireEnv) naming how to get it: install is the hint, such as
// "apt-get install -y tmux".
func LookTool(t testing.TB, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		SkipOrFail(t, name+" not found ("+install+")")
	}
	return p
}

// HangGuard bounds WaitFor: only a failure waits this long.
const HangGuard = 30 * time.Second

// pollEvery is how often WaitFor looks again.
const pollEvery = 2 * time.Millisecond

// WaitFor polls cond until it holds, and fails t naming what it waited for
// when it still does not after HangGuard. It is a hang guard, never a timed
// assertion.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForWithin(t, HangGuard, what, cond)
}

// WaitForState is WaitFor whose failure also shows state() as it was last
// seen (a collector's counters, a queue's length), so a hang says where it
// stopped.
func WaitForState(t testing.TB, what string, cond func() bool, state func() any) {
	t.Helper()
	deadline := time.Now().Add(HangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last state %+v", what, state())
		}
		time.Sleep(pollEvery)
	}
}

// WaitForWithin is WaitFor with another hang guard, for waits that build or
// start a program first.
func WaitForWithin(t testing.TB, guard time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(pollEvery)
	}
}
