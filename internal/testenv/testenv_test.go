package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records Skip and Fatal instead of stopping
// the goroutine, so the helpers' verdicts can be checked.
type recorder struct {
	testing.TB
	skipped, failed string
}

type stop struct{}

func (r *recorder) Helper()                        {}
func (r *recorder) Skip(args ...any)               { r.skipped = args[0].(string); panic(stop{}) }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = format; panic(stop{}) }

func run(fn func(*recorder)) (r *recorder) {
	r = &recorder{}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(stop); !ok {
				panic(v)
			}
		}
	}()
	fn(r)
	return r
}

func TestSkipOrFail(t *testing.T) {
	t.Setenv(RequireEnv, "")
	r := run(func(r *recorder) { SkipOrFail(r, "no tmux") })
	if r.skipped != "no tmux" || r.failed != "" {
		t.Errorf("without %s: skipped %q failed %q, want a skip naming the reason", RequireEnv, r.skipped, r.failed)
	}
	t.Setenv(RequireEnv, "1")
	r = run(func(r *recorder) { SkipOrFail(r, "no tmux") })
	if r.failed == "" || r.skipped != "" {
		t.Errorf("with %s=1: skipped %q failed %q, want a failure", RequireEnv, r.skipped, r.failed)
	}
}

func TestLookTool(t *testing.T) {
	t.Setenv(RequireEnv, "")
	r := run(func(r *recorder) { LookTool(r, "kvcanary-no-such-tool", "apt-get install -y nothing") })
	if r.skipped != "kvcanary-no-such-tool not found (apt-get install -y nothing)" {
		t.Errorf("skip reason %q", r.skipped)
	}
	if p := LookTool(t, "go", "install Go"); p == "" {
		t.Error("LookTool(go) returned an empty path")
	}
}

func TestWaitFor(t *testing.T) {
	var n atomic.Int32
	WaitFor(t, "three polls", func() bool { return n.Add(1) == 3 })
	if n.Load() != 3 {
		t.Errorf("polled %d times, want 3", n.Load())
	}
	WaitForState(t, "a true condition", func() bool { return true }, func() any { t.Error("state asked for"); return nil })
	r := run(func(r *recorder) { WaitForWithin(r, time.Millisecond, "never", func() bool { return false }) })
	if r.failed != "timed out waiting for %s" {
		t.Errorf("a condition that never holds: failed %q, want the timeout", r.failed)
	}
}

func TestFreeAddr(t *testing.T) {
	addr := FreeAddr(t)
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Errorf("dial %s succeeded, want nothing listening", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v, want the address free", addr, err)
	}
	ln.Close()
}

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := len(b.String()); n != 400 {
		t.Errorf("%d bytes, want 400", n)
	}
	b.Reset()
	if b.String() != "" {
		t.Errorf("after Reset: %q", b.String())
	}
}
