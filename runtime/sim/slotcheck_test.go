package sim

import (
	"slices"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// TestCanarySlotCheckMatchesStores checks the canary's slot-by-slot
// comparison of expected pages (canary/SPEC.md §2) against the twin's own
// record of every store: a page is rewritten exactly when every store on it
// wrote the bytes its slot already held and nothing else changed it, and
// collateral exactly when a stale padded-row store (stale-outloc) changed
// bytes on it.
func TestCanarySlotCheckMatchesStores(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed = 9 // a seed whose 16×3 run recycles pages into identical rewrites
	cfg.Inject = []string{FaultStaleOutLoc}
	cfg.TestRetractEvery = 5
	cfg.Instruments = Instruments{Canary: true, CanaryPolicy: "live"}
	sessions, rounds := 16, 3
	if small() {
		sessions, rounds = 14, 1 // forced retraction needs bs > 10
	}
	type stepTruth struct {
		identical map[uint32]bool // page → every row store on it was identical so far
		stray     map[uint32]bool // pages a stale padded store changed
	}
	truth := map[uint64]*stepTruth{}
	at := func(step uint64) *stepTruth {
		if truth[step] == nil {
			truth[step] = &stepTruth{identical: map[uint32]bool{}, stray: map[uint32]bool{}}
		}
		return truth[step]
	}
	ref, err := NewArena(cfg.IndexKDtype, 2)
	if err != nil {
		t.Fatal(err)
	}
	// sameAsStored reports whether slot holds the bytes key encodes to.
	sameAsStored := func(e *Engine, slot int, key []float32) bool {
		ref.Store(PageTokens, key)
		return string(e.dec.appendSlot(nil, slot)) == string(ref.appendSlot(nil, PageTokens))
	}
	var c collect
	driveEngine(t, cfg, sessions, rounds, &c, func(e *Engine) {
		e.testStore = func(rw *row, _ int32) {
			st := at(e.replays)
			pg := uint32(rw.r.outSlot / PageTokens)
			same := sameAsStored(e, rw.r.outSlot, e.keyBuf)
			if prev, ok := st.identical[pg]; ok {
				same = same && prev
			}
			st.identical[pg] = same
		}
		e.testPadStore = func(slot int, _ int32) {
			key := make([]float32, HeadDim)
			indexKey(0, TokBOS, key)
			if !sameAsStored(e, slot, key) {
				at(e.replays).stray[uint32(slot/PageTokens)] = true
			}
		}
	}, nil)

	rewritten, collateral, strayExpected := 0, 0, 0
	for _, ev := range c.evs {
		cp, ok := ev.Body.(*hook.CanaryPages)
		if !ok {
			continue
		}
		if !cp.SlotChecked {
			t.Fatalf("step %d: slot_checked not set", cp.Step)
		}
		st := at(cp.Step)
		var wantRewritten, wantCollateral []uint32
		for _, pg := range cp.Expected {
			switch {
			case st.stray[pg]:
				wantCollateral = append(wantCollateral, pg)
				strayExpected++
			case st.identical[pg]:
				wantRewritten = append(wantRewritten, pg)
			}
		}
		slices.Sort(wantRewritten)
		slices.Sort(wantCollateral)
		var gotCollateral []uint32
		for _, ch := range cp.Collateral {
			gotCollateral = append(gotCollateral, ch.Page)
			if ch.Owner == "" {
				t.Errorf("step %d: collateral page %d names no owner", cp.Step, ch.Page)
			}
		}
		if !slices.Equal(cp.Rewritten, wantRewritten) {
			t.Errorf("step %d: rewritten %v, want %v", cp.Step, cp.Rewritten, wantRewritten)
		}
		if !slices.Equal(gotCollateral, wantCollateral) {
			t.Errorf("step %d: collateral %v, want %v", cp.Step, gotCollateral, wantCollateral)
		}
		rewritten += len(cp.Rewritten)
		collateral += len(cp.Collateral)
	}
	t.Logf("%d rewritten pages, %d collateral pages", rewritten, collateral)
	if collateral == 0 {
		t.Fatal("no stale padded store changed an expected page: collateral detection not exercised")
	}
	if rewritten == 0 && !small() {
		t.Fatal("no identical rewrite happened: rewritten detection not exercised")
	}
}
