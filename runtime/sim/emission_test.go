package sim

import (
	"context"
	"slices"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// TestGraphDiffVectorsEvery: with the default emission policy every sample
// whose selections differ carries both logit rows, so does every Nth sample,
// and the rest carry their selections only; GraphDiffVectorsEvery 1 puts the
// rows on every sample.
func TestGraphDiffVectorsEvery(t *testing.T) {
	run := func(every int) []*hook.GraphDiffSample {
		cfg := DefaultConfig()
		cfg.Instruments = Instruments{GraphDiff: true, GraphDiffEvery: 1, GraphDiffVectorsEvery: every}
		w := testWorkload()
		w.Sessions, w.Rounds = 12, 2
		if small() {
			// Two runs with graphdiff on every step: minutes under -race
			// at 6×2. The emission policy is per sample, and 3×1 makes
			// hundreds of them.
			w.Sessions, w.Rounds = 3, 1
		}
		var c collect
		if _, err := Run(context.Background(), cfg, w, &c); err != nil {
			t.Fatal(err)
		}
		var out []*hook.GraphDiffSample
		for _, ev := range c.evs {
			if s, ok := ev.Body.(*hook.GraphDiffSample); ok {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			t.Fatal("no graph-vs-eager samples")
		}
		return out
	}
	for i, s := range run(1) {
		if len(s.Graph) != s.SeqLen || len(s.Eager) != s.SeqLen {
			t.Fatalf("every 1: sample %d has rows of %d/%d for %d positions", i, len(s.Graph), len(s.Eager), s.SeqLen)
		}
	}
	rows := 0
	ss := run(DefaultGraphDiffVectorsEvery)
	for i, s := range ss {
		has := len(s.Graph) > 0
		if len(s.Graph) != len(s.Eager) {
			t.Fatalf("sample %d: graph row %d, eager row %d", i, len(s.Graph), len(s.Eager))
		}
		if len(s.TopKGraph) == 0 || len(s.TopKEager) == 0 {
			t.Fatalf("sample %d lacks its selections", i)
		}
		if !slices.Equal(s.TopKGraph, s.TopKEager) && !has {
			t.Fatalf("sample %d (step %d): selections differ but no logit rows", i, s.Step)
		}
		if i%DefaultGraphDiffVectorsEvery == 0 && !has {
			t.Fatalf("sample %d: every %dth sample carries its rows", i, DefaultGraphDiffVectorsEvery)
		}
		if has {
			rows++
		}
	}
	if rows == len(ss) {
		t.Fatalf("all %d samples carry rows: the policy sent no selection-only sample", rows)
	}
	t.Logf("%d of %d samples carry logit rows", rows, len(ss))
}
