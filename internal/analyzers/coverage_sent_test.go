package analyzers

import (
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Issue 27 D6: a producer's run.end says how many events it sent (sent);
// when the bundles read hold fewer of its (src.node, src.pid) events — a
// collector killed before it flushed them — every layer's verdict is
// partial, naming the producer and the shortfall. Its events spread over
// two bundles (the collector restarted) count together; a run.end without
// sent (an older producer) is never a shortfall.
func TestCoverageSentShortfall(t *testing.T) {
	p := hook.Source{Node: "gpu-7", Proc: "python3", PID: 7909, Role: "decode", Rank: 1}
	other := hook.Source{Node: "gpu-7", Proc: "python3", PID: 7910, Role: "decode", Rank: 0}
	replays := func(cc *CoverageCollector, src hook.Source, n int) {
		for i := range n {
			cc.Observe(hook.Event{Kind: hook.KindReplay, TS: int64(i + 1), Src: src, Body: &hook.Replay{Step: uint64(i), Mode: "graph"}})
		}
	}
	end := func(cc *CoverageCollector, src hook.Source, sent uint64) {
		cc.Observe(hook.Event{Kind: hook.KindRunEnd, TS: 1e6, Src: src, Body: &hook.RunEnd{WallNS: 1, Sent: sent}})
	}
	// One bundle: 1319 sent, 1277 held; the other producer is whole.
	cc := NewCoverageCollector()
	replays(cc, p, 1277)
	end(cc, p, 1319)
	replays(cc, other, 3)
	end(cc, other, 3)
	want := "python3 pid 7909 on gpu-7 (decode rank 1) sent 1319 events, the bundles hold 1277 (42 missing)"
	c := cc.Result()
	for _, a := range []string{checksum.AnalyzerName, canary.AnalyzerName} {
		if got := c.Partial(a); !strings.Contains(got, want) || strings.Contains(got, "7910") {
			t.Fatalf("Partial(%s) = %q, want it to name only %q", a, got, want)
		}
	}

	// Two bundles of one run, the collector restarted between them.
	first, second := NewCoverageCollector(), NewCoverageCollector()
	replays(first, p, 700)
	replays(second, p, 619)
	end(second, p, 1319)
	if got := second.Result().Partial(checksum.AnalyzerName); !strings.Contains(got, "hold 619 (700 missing)") {
		t.Fatalf("the second bundle alone: %q, want 700 missing", got)
	}
	var both Coverage
	both.Merge(first.Result())
	both.Merge(second.Result())
	if got := both.Partial(checksum.AnalyzerName); got != "" {
		t.Fatalf("both bundles hold all 1319: Partial = %q, want clean", got)
	}

	// An older producer: no sent, nothing known lost.
	old := NewCoverageCollector()
	replays(old, p, 5)
	end(old, p, 0)
	if got := old.Result().Partial(checksum.AnalyzerName); got != "" {
		t.Fatalf("run.end without sent: Partial = %q, want clean", got)
	}
}
