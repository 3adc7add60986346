package graphdiff

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Issue 27 D16: the analyzer a long-running collector feeds keeps no state
// per session it merely saw (before: about 80 B per distinct session id,
// without bound), and caps the ids it does keep.
func TestAnalyzerStateBoundedOverSessions(t *testing.T) {
	a := NewAnalyzer(Options{})
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	emit := func(hook.Event) {}
	before := heap()
	const n = 200_000
	for i := range n {
		a.Observe(hook.Event{Kind: hook.KindSession, Body: &hook.Session{ID: fmt.Sprintf("s%07d", i), Outcome: hook.OutcomeDone}}, emit)
	}
	grew := int64(heap()) - int64(before)
	runtime.KeepAlive(a)
	t.Logf("%d sessions: heap grew %d bytes (%.1f B per session)", n, grew, float64(grew)/n)
	if grew > 1<<20 {
		t.Fatalf("heap grew %d bytes over %d done sessions", grew, n)
	}
	for i := range MaxTrackedIDs + 10 {
		a.Observe(hook.Event{Kind: hook.KindSession, Body: &hook.Session{ID: fmt.Sprintf("l%07d", i), Outcome: hook.OutcomeLeak}}, emit)
	}
	if len(a.leaked) != MaxTrackedIDs || !a.Result().IDsCapped {
		t.Fatalf("leaked ids kept %d (capped %v), want %d and capped", len(a.leaked), a.Result().IDsCapped, MaxTrackedIDs)
	}
}
