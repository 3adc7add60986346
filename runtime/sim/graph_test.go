package sim

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func TestPlannerAliasesLogitsWithMainScratch(t *testing.T) {
	g := planGraph(16, false)
	if !g.overlaps(g.l, g.s) {
		t.Fatal("bf16 plan: the attention-prep scratch should reuse the logits' bytes (dead in capture order)")
	}
	for _, pair := range [][2]int{{g.q, g.l}, {g.q, g.s}, {g.h, g.s}, {g.t, g.s}, {g.l, g.t}} {
		if g.overlaps(pair[0], pair[1]) {
			t.Errorf("tensors %s and %s overlap while both live in capture order", g.tensors[pair[0]].name, g.tensors[pair[1]].name)
		}
	}
	f := planGraph(16, true)
	if f.l >= 0 {
		t.Fatal("fp8 plan: logits must live in a persistent buffer, not the graph arena")
	}
	for i := range f.tensors {
		for j := i + 1; j < len(f.tensors); j++ {
			a, b := f.tensors[i], f.tensors[j]
			live := a.first <= b.last && b.first <= a.last
			if live && f.overlaps(i, j) {
				t.Errorf("fp8 plan: %s and %s overlap", a.name, b.name)
			}
		}
	}
}

func TestScheduleWithoutOverlapIsProgramOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seqs := []int{2000, 2500, 3000, 1800}
	u := schedule(4, seqs, false, rng, nil)
	lastTopK, firstPre := -1, len(u)
	for i, x := range u {
		if x.op == opTopK {
			lastTopK = i
		}
		if x.op == opAttnPre && i < firstPre {
			firstPre = i
		}
	}
	if lastTopK > firstPre {
		t.Fatal("single stream: attn_prep ran before the indexer's top-k finished")
	}
	// With overlap the two streams interleave: over many replays some
	// attn_prep row lands between a row's logits and its top-k.
	races := 0
	for rep := range 2000 {
		rng := rand.New(rand.NewPCG(uint64(rep), 3))
		u := schedule(4, seqs, true, rng, nil)
		landed := map[int]bool{}
		for _, x := range u {
			switch x.op {
			case opLogits:
				landed[x.row] = true
			case opTopK:
				delete(landed, x.row)
			case opAttnPre:
				if landed[x.row] {
					races++
				}
			}
		}
	}
	if races == 0 {
		t.Fatal("overlap never interleaved attn_prep inside a row's logits→top-k window")
	}
	t.Logf("%d of 2000 replays raced", races)
}

// TestBaselineRaceLeavesIndexKPristine: in the baseline the canary sees
// only expected stores, padding and transfers — the index-K arena is never
// overwritten — while graph-vs-eager selections diverge.
func TestBaselineRaceLeavesIndexKPristine(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Instruments.GraphDiffEvery = 1
	cfg.Instruments.GraphDiffTopKOnly = true
	w := testWorkload()
	w.Sessions, w.Rounds = 40, 3
	if small() {
		t.Skip("a 40×3 run: minutes under -race; skipped with -short too")
	}
	var c collect
	res, err := Run(context.Background(), cfg, w, &c)
	if err != nil {
		t.Fatal(err)
	}
	if n := foreignWrites(c.evs); n != 0 {
		t.Fatalf("%d pages changed outside the expected write set", n)
	}
	divergent := 0
	for _, ev := range c.evs {
		if s, ok := ev.Body.(*hook.GraphDiffSample); ok && grossDivergence(s) {
			divergent++
		}
	}
	if divergent == 0 {
		t.Fatal("no graph-vs-eager divergence in the baseline")
	}
	t.Logf("corrupted %d/%d, %d divergent samples, index-K pristine", summary(res).CorruptedSessions, res.Sessions, divergent)
}

func TestTopKNaNFirstTiesLow(t *testing.T) {
	nan := float32(0)
	nan = nan / nan
	got := topK([]float32{1, 3, 3, nan, 2, 0}, 3, nil)
	if !slices.Equal(got, []int32{3, 1, 2}) {
		t.Fatalf("topK = %v, want [3 1 2]", got)
	}
}

// TestCanaryCacheMatchesFullDigests: digests reused through the arena's
// write generations give exactly the canary events of re-digesting every
// page before and after every replay.
func TestCanaryCacheMatchesFullDigests(t *testing.T) {
	run := func(verify int) []hook.Event {
		cfg := DefaultConfig()
		cfg.Seed = 3
		cfg.Inject = []string{FaultStaleOutLoc, FaultTransferRace}
		cfg.Instruments = Instruments{Canary: true, CanaryPolicy: "live"}
		var c collect
		n := 16
		if small() {
			n = 4
		}
		driveEngine(t, cfg, n, 2, &c, func(e *Engine) { e.canaryVerify = verify }, nil)
		return c.evs
	}
	a, b := run(1), run(canaryVerifyEvery)
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("event counts differ: %d vs %d", len(a), len(b))
	}
	for i := range a {
		ja, _ := a[i].MarshalJSON()
		jb, _ := b[i].MarshalJSON()
		if string(ja) != string(jb) {
			t.Fatalf("event %d differs:\n%s\n%s", i, ja, jb)
		}
	}
}

// TestGraphDiffDefaultCatchesBaseline: the default sampling policy sees a
// graph-vs-eager selection divergence in every 40×3 baseline run.
func TestGraphDiffDefaultCatchesBaseline(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("full 40×3 runs: skipped under -race and -short")
	}
	for seed := uint64(1); seed <= 5; seed++ {
		cfg := DefaultConfig()
		cfg.Seed = seed
		cfg.Instruments = Instruments{GraphDiff: true, GraphDiffEvery: DefaultGraphDiffEvery, GraphDiffTopKOnly: true}
		w := testWorkload()
		w.Sessions, w.Rounds = 40, 3
		var c collect
		res, err := Run(context.Background(), cfg, w, &c)
		if err != nil {
			t.Fatal(err)
		}
		divergent := 0
		for _, ev := range c.evs {
			if s, ok := ev.Body.(*hook.GraphDiffSample); ok && grossDivergence(s) {
				divergent++
			}
		}
		if divergent == 0 {
			t.Errorf("seed %d: no divergence sampled (corrupted %d/%d)", seed, summary(res).CorruptedSessions, res.Sessions)
		}
	}
}

// grossDivergence: the graph kept less than half of the eager selection
// (rounding alone only swaps entries at the top-k boundary).
func grossDivergence(s *hook.GraphDiffSample) bool {
	common := 0
	for _, p := range s.TopKGraph {
		if slices.Contains(s.TopKEager, p) {
			common++
		}
	}
	return len(s.TopKEager) > 0 && 2*common < len(s.TopKEager)
}
