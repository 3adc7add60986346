package cudaprobe

import (
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// timed stamps calls 1 µs apart from t0, as one thread of process pid.
func timed(calls []hook.CUDA, pid uint32, t0 int64) []hook.CUDA {
	out := make([]hook.CUDA, len(calls))
	for i, c := range calls {
		c.PID, c.TID = pid, pid
		c.StartNS = t0 + int64(i)*1000
		c.EndNS = c.StartNS + 400
		out[i] = c
	}
	return out
}

// checkScriptSummary asserts the views of one run of `driver script`.
func checkScriptSummary(t *testing.T, s Summary, pid uint32) {
	t.Helper()
	wantCalls := map[string]uint64{
		"cuStreamBeginCapture": 2, "cuStreamEndCapture": 2, "cuGraphInstantiateWithFlags": 2,
		"cuLaunchKernel": 4, "cuEventRecord": 4, "cuStreamWaitEvent": 4, "cuGraphLaunch": 8,
		"cuMemcpyHtoDAsync": 1, "cuMemAlloc": 1, "cuMemcpyAsync": 2, "cuMemFree": 1,
	}
	if s.Events != scriptEvents || len(s.Calls) != len(wantCalls) {
		t.Fatalf("events %d calls %v", s.Events, s.Calls)
	}
	for k, n := range wantCalls {
		if s.Calls[k] != n {
			t.Errorf("calls[%s] = %d, want %d", k, s.Calls[k], n)
		}
	}
	if len(s.Captures) != 2 {
		t.Fatalf("captures %+v", s.Captures)
	}
	c1, c2 := s.Captures[0], s.Captures[1]
	for i, tc := range []struct {
		c              Capture
		graph, exec    hook.Hex64
		launches, side int
		replays        uint64
	}{{c1, g1, x1, 2, 1, 5}, {c2, g2, x2, 3, 3, 3}} {
		c := tc.c
		if c.PID != pid || c.Origin != sA || c.Graph != tc.graph || len(c.Execs) != 1 || c.Execs[0] != tc.exec ||
			len(c.Joined) != 1 || c.Joined[0] != sB || c.Launches != tc.launches || c.SideLaunches != tc.side ||
			c.Replays != tc.replays || c.Open || c.EndNS <= c.StartNS {
			t.Errorf("capture %d: %+v", i+1, c)
		}
	}
	if c1.EndNS >= c2.StartNS {
		t.Errorf("capture windows overlap: %+v %+v", c1, c2)
	}
	if len(s.Replays) != 1 || s.Replays[0].Stream != sA || s.Replays[0].Replays != 8 || s.Replays[0].Execs != 2 ||
		s.Replays[0].PerSec <= 0 {
		t.Errorf("replays %+v", s.Replays)
	}
	if s.HintsTotal != 2 || len(s.Hints) != 2 {
		t.Fatalf("hints %+v", s.Hints)
	}
	for i, call := range []string{"cuLaunchKernel", "cuMemcpyHtoDAsync_v2"} {
		h := s.Hints[i]
		if h.Call != call || h.Side != sB || h.Origin != sA || h.Graph != g2 || h.Exec != x2 ||
			h.LaunchNS <= h.CaptureStartNS || h.LaunchNS >= h.CaptureEndNS || h.NextReplayNS <= h.CaptureEndNS ||
			h.CaptureStartNS != c2.StartNS {
			t.Errorf("hint %d: %+v", i, h)
		}
	}
	if msg := s.Hints[0].String(); !strings.Contains(msg, "cuLaunchKernel on side stream 0x00000000000000b0") ||
		!strings.Contains(msg, "replayed as exec 0x0000000000006120") {
		t.Errorf("hint text %q", msg)
	}
}

func TestViewsScript(t *testing.T) {
	var v Views
	calls := timed(scriptCalls(), 100, 1_000_000)
	for i := range calls {
		v.Add(&calls[i])
	}
	checkScriptSummary(t, v.Summary(), 100)
}

func TestViewsSeparateProcessesAndOpenCaptures(t *testing.T) {
	var v Views
	a := timed(scriptCalls(), 1, 0)
	b := timed(scriptCalls()[:3], 2, 500) // process 2 stops inside its first capture
	for i := range a {
		v.Add(&a[i])
		if i < len(b) {
			v.Add(&b[i])
		}
	}
	s := v.Summary()
	if len(s.Captures) != 3 || !s.Captures[2].Open || s.Captures[2].PID != 2 || s.Captures[2].Launches != 1 {
		t.Fatalf("captures %+v", s.Captures)
	}
	if s.HintsTotal != 2 || s.Hints[0].PID != 1 {
		t.Fatalf("hints %+v", s.Hints)
	}
	if s.Events != scriptEvents+3 {
		t.Fatalf("events %d", s.Events)
	}
}

func TestViewsBounds(t *testing.T) {
	v := Views{MaxCaptures: 1, MaxHints: 1}
	calls := timed(scriptCalls(), 1, 0)
	for i := range calls {
		v.Add(&calls[i])
	}
	s := v.Summary()
	if len(s.Captures) != 1 || s.CapturesDropped != 1 || len(s.Hints) != 1 || s.HintsTotal != 2 {
		t.Fatalf("bounds: %d captures (%d dropped), %d hints of %d", len(s.Captures), s.CapturesDropped, len(s.Hints), s.HintsTotal)
	}
}

func TestViewsIgnoresUnmatchedEnds(t *testing.T) {
	var v Views
	calls := timed([]hook.CUDA{
		{Call: "cuStreamEndCapture", Stream: sA, Arg: g1}, // began before the probe attached
		{Call: "cuStreamWaitEvent", Stream: sB, Arg: evFork},
		{Call: "cuGraphLaunch", Stream: sA, GraphExec: x1},
		{Call: "cuSomethingNew"},
	}, 1, 0)
	for i := range calls {
		v.Add(&calls[i])
	}
	s := v.Summary()
	if len(s.Captures) != 0 || len(s.Hints) != 0 || s.Replays[0].Replays != 1 || s.Calls["cuSomethingNew"] != 1 {
		t.Fatalf("%+v", s)
	}
}
