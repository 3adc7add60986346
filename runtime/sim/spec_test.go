package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
	"github.com/kvcanary/kvcanary/spec/pagediff"
)

// fillArena gives every byte of a a distinct-ish value.
func fillArena(a *Arena) {
	for i := range a.Buf {
		a.Buf[i] = byte(i*7 + i/251)
	}
}

// TestArenaMoveSlots: the correct move copies exactly the token row (key,
// and the fp8 scale) of each source slot to its target slot, reading every
// source before writing, and bumps the target page's generation only.
func TestArenaMoveSlots(t *testing.T) {
	for _, dtype := range []string{"bf16", "fp8"} {
		a, err := NewArena(dtype, 8)
		if err != nil {
			t.Fatal(err)
		}
		fillArena(a)
		orig := slices.Clone(a.Buf)
		tgt, src := []int{2*PageTokens + 5, 3*PageTokens + 63}, []int{2*PageTokens + 9, 2*PageTokens + 5}
		rows := [][]byte{a.appendSlot(nil, src[0]), a.appendSlot(nil, src[1])}
		gen := slices.Clone(a.Gen)
		a.MoveSlots(tgt, src, nil)
		for i, s := range tgt {
			if got := a.appendSlot(nil, s); !bytes.Equal(got, rows[i]) {
				t.Fatalf("%s: slot %d does not hold the row of slot %d (read before any write)", dtype, s, src[i])
			}
		}
		if len(rows[0]) != a.L.TokenBytes() {
			t.Fatalf("%s: row of %d bytes, want %d", dtype, len(rows[0]), a.L.TokenBytes())
		}
		// Every other byte is untouched: restore the two rows and compare.
		after := slices.Clone(a.Buf)
		b := &Arena{L: a.L, Buf: after, Pages: a.Pages, Gen: make([]uint32, a.Pages)}
		for _, s := range tgt {
			b.putSlot(s, (&Arena{L: a.L, Buf: orig, Pages: a.Pages}).appendSlot(nil, s))
		}
		if !bytes.Equal(after, orig) {
			t.Fatalf("%s: bytes outside the target rows changed", dtype)
		}
		if a.Gen[2] != gen[2]+1 || a.Gen[3] != gen[3]+1 || a.Gen[1] != gen[1] || a.Gen[4] != gen[4] {
			t.Fatalf("%s: generations %v (were %v)", dtype, a.Gen, gen)
		}
	}
}

// TestArenaMovePageRows: the faulty move copies whole page rows, indexed by
// the ids as if they were pages; an id beyond the pool fails the whole call
// with torch's IndexError and writes nothing.
func TestArenaMovePageRows(t *testing.T) {
	a, err := NewArena("fp8", 8)
	if err != nil {
		t.Fatal(err)
	}
	fillArena(a)
	orig := slices.Clone(a.Buf)
	pb := a.L.PageBytes()
	written, _, err := a.MovePageRows([]int{5, 1}, []int{1, 6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(written, []uint32{5, 1}) {
		t.Fatalf("written %v", written)
	}
	if !bytes.Equal(a.Buf[5*pb:6*pb], orig[1*pb:2*pb]) || !bytes.Equal(a.Buf[1*pb:2*pb], orig[6*pb:7*pb]) {
		t.Fatal("page rows not copied whole (sources gathered before the writes)")
	}
	for _, p := range []int{0, 2, 3, 4, 6, 7} {
		if !bytes.Equal(a.Buf[p*pb:(p+1)*pb], orig[p*pb:(p+1)*pb]) {
			t.Fatalf("page %d changed", p)
		}
	}
	before, gen := slices.Clone(a.Buf), slices.Clone(a.Gen)
	for _, c := range []struct{ tgt, src []int }{{[]int{3}, []int{8}}, {[]int{2, 70}, []int{4, 5}}} {
		w, _, err := a.MovePageRows(c.tgt, c.src, nil)
		var oob *OutOfBoundsError
		if !errors.As(err, &oob) || oob.Size != 8 || w != nil {
			t.Fatalf("move %v←%v: err %v, written %v", c.tgt, c.src, err, w)
		}
		if want := fmt.Sprintf("IndexError: index %d is out of bounds for dimension 0 with size 8", oob.Index); err.Error() != want {
			t.Fatalf("error %q", err)
		}
	}
	if !bytes.Equal(a.Buf, before) || !slices.Equal(a.Gen, gen) {
		t.Fatal("a failed call wrote something")
	}
}

// specConfig is the spec-move test configuration: the default engine with
// tree drafting, the canary on, nothing else.
func specConfig(seed uint64, policy string, inject ...string) Config {
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.SpeculativeEagleTopK = 2
	cfg.Inject = inject
	cfg.Instruments = Instruments{Canary: true, CanaryPolicy: policy}
	return cfg
}

// TestSpecMovesCorrectAreNeutral: correct moves leave every position the
// indexer reads as the baseline has it, so the run's outputs are identical
// to the run without speculative moves; the canary finds nothing in replays
// or between them, and sees every move as an expected write between steps.
func TestSpecMovesCorrectAreNeutral(t *testing.T) {
	w := testWorkload()
	w.Sessions, w.Rounds = 16, 2
	if small() {
		w.Sessions = 6
	}
	for _, c := range []struct {
		k      int
		disagg string
	}{{2, "pd"}, {4, "pd"}, {2, "none"}} {
		k := c.k
		base := quietConfig(2)
		base.Disaggregation = c.disagg
		want, err := Run(context.Background(), base, w, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := specConfig(2, "live")
		cfg.Disaggregation = c.disagg
		cfg.SpeculativeEagleTopK = k
		a := canary.NewAnalyzer(canary.Options{})
		var findings int
		pub := hook.WithAnalyzers(hook.PublishFunc(func(ev hook.Event) {
			if ev.Kind == hook.KindFinding {
				findings++
			}
		}), a)
		got, err := Run(context.Background(), cfg, w, pub)
		if err != nil {
			t.Fatal(err)
		}
		if got.Stats.SpecMoves == 0 || got.Stats.SpecMoveErrors != 0 {
			t.Fatalf("topk %d: %d moves, %d errors", k, got.Stats.SpecMoves, got.Stats.SpecMoveErrors)
		}
		st := got.Stats
		st.SpecMoves = 0
		if !reflect.DeepEqual(got.PerSession, want.PerSession) || st != want.Stats {
			t.Fatalf("topk %d, disaggregation %s: correct moves changed the run: stats %+v vs %+v", k, c.disagg, got.Stats, want.Stats)
		}
		s := a.Result()
		if findings != 0 || s.Findings() || s.Between == nil {
			t.Fatalf("topk %d: %d findings with correct moves: %+v", k, findings, s)
		}
		// Every move is an expected write of the next check, except the
		// last replay's (no replay follows them, so no check either);
		// other known writers (a prefill without PD, a transfer landing in
		// a step without a batch) add expected writes of their own.
		b := s.Between
		seen := b.ExpectedWrites + b.RewrittenStores
		if seen+uint64(cfg.MaxRunningRequests) < uint64(got.Stats.SpecMoves) || b.SlotCheckedChecks == 0 || s.BetweenChecks != s.Replays-1 {
			t.Fatalf("topk %d, disaggregation %s: %d moves but between %+v (checks %d, replays %d)", k, c.disagg, got.Stats.SpecMoves, b, s.BetweenChecks, s.Replays)
		}
	}
}

// victimRun is what a spec-move run showed: the victims the twin's own
// record says the canary must name, and what it named.
type victimRun struct {
	e                  *Engine
	truth, found       map[string]bool // "step/page/owner"
	victims, uncovered int             // faulty writes to running requests' pages; of which outside the window's page set
	summary            canary.Summary
}

// runVictims drives an engine with cfg through drive and judges every
// between-phase check against the twin's ground truth: the pages the faulty
// move wrote in the window (testMove, the data path's own record) that the
// window's page set covered, whose bytes differ from their after-snapshot,
// and whose owner runs in the next step. drive must call setup on the
// engine before its first step.
func runVictims(t *testing.T, cfg Config, drive func(pub hook.Publisher, setup func(*Engine))) *victimRun {
	t.Helper()
	v := &victimRun{truth: map[string]bool{}, found: map[string]bool{}}
	var window []uint32 // pages the faulty moves wrote since the last between check
	a := canary.NewAnalyzer(canary.Options{})
	pub := hook.WithAnalyzers(hook.PublishFunc(func(ev hook.Event) {
		switch b := ev.Body.(type) {
		case *hook.CanaryPages:
			if b.Phase != string(pagediff.PhaseBetween) {
				return
			}
			// The engine is paused inside its between check: judge the
			// window's faulty writes from its own state.
			e := v.e
			running := map[string]bool{}
			for _, id := range b.Running {
				running[id] = true
			}
			for _, p := range window {
				owner := e.reqID(e.decAlloc.Owner(p))
				if !running[owner] {
					continue
				}
				v.victims++
				i, ok := slices.BinarySearch(e.spec.prevPages, p)
				if !ok {
					v.uncovered++
					continue
				}
				if kvlayout.Page(e.dec.L, e.dec.Buf, p) != e.spec.prevDig[i] {
					v.truth[fmt.Sprintf("%d/%d/%s", b.Step, p, owner)] = true
				}
			}
			window = window[:0]
		case *hook.Finding:
			if b.Evidence["class"] != canary.ClassLiveOverwrite.String() {
				return
			}
			if b.Evidence["phase"] != string(pagediff.PhaseBetween) {
				t.Errorf("live overwrite outside the between phase: %+v", b)
				return
			}
			v.found[b.Evidence["step"]+"/"+b.Evidence["page"]+"/"+b.Evidence["victim"]] = true
		}
	}), a)
	drive(pub, func(en *Engine) {
		v.e = en
		en.testMove = func(w []uint32) { window = append(window, w...) }
	})
	v.summary = a.Result()
	s := v.summary
	t.Logf("moves %d (%d out of bounds); victims owned by running requests %d (%d outside the window's page set); canary: between live %d missing %d, replay live %d",
		v.e.stats.SpecMoves, v.e.stats.SpecMoveErrors, v.victims, v.uncovered, s.Between.LivePageOverwrites, s.Between.MissingStores, s.LivePageOverwrites)
	if len(v.truth) == 0 {
		t.Fatal("the faulty move overwrote no live page: the fault is not exercised")
	}
	if !maps.Equal(v.found, v.truth) {
		t.Fatalf("canary named %d victims, ground truth %d:\nfound %v\ntruth %v", len(v.found), len(v.truth), v.found, v.truth)
	}
	if s.LivePageOverwrites != 0 || s.Between.LivePageOverwrites != uint64(len(v.truth)) {
		t.Fatalf("summary: replay live %d, between live %d, want 0 and %d", s.LivePageOverwrites, s.Between.LivePageOverwrites, len(v.truth))
	}
	// Moves that failed or went to the wrong page never wrote their
	// target: missing stores, at most one per move.
	if s.Between.MissingStores == 0 || s.Between.MissingStores+s.Between.RewrittenStores > uint64(v.e.stats.SpecMoves) {
		t.Fatalf("between missing %d + rewritten %d for %d moves", s.Between.MissingStores, s.Between.RewrittenStores, v.e.stats.SpecMoves)
	}
	return v
}

// TestSpecMoveFaultVictimsExactly: with the spec-move fault the canary's
// between-phase live overwrites are exactly the victims of the twin's ground
// truth (runVictims), each finding naming the page's owner; replays find
// nothing live. Live victims need recycled low pages (second rounds), so
// this takes 24 sessions × 2 rounds; TestSpecMoveFaultNamesVictim builds
// the situation directly and also runs under -race.
func TestSpecMoveFaultVictimsExactly(t *testing.T) {
	if small() {
		t.Skip("24×2 sessions, skipped under -race and -short: TestSpecMoveFaultNamesVictim covers the fault there")
	}
	for _, policy := range []string{"live", "all"} {
		t.Run(policy, func(t *testing.T) {
			cfg := specConfig(1, policy, FaultSpecMove)
			cfg.SpeculativeEagleTopK = 0 // the fault implies tree drafting
			v := runVictims(t, cfg, func(pub hook.Publisher, setup func(*Engine)) {
				driveEngine(t, cfg, 24, 2, pub, setup, nil)
			})
			if policy == "all" && v.uncovered != 0 {
				t.Fatalf("policy all left %d victims outside the compared set", v.uncovered)
			}
		})
	}
}

// TestSpecMoveFaultNamesVictim builds the bug's victims directly: request A
// (a one-page prompt, decode page 1) moves its accepted tokens to slots
// 64+n, which the faulty move takes for page rows 64+n — pages of B2
// (49..95) and B3 (96..142), decoding at the same time. The canary must name
// them exactly where the twin's record says their pages were overwritten.
func TestSpecMoveFaultNamesVictim(t *testing.T) {
	cfg := specConfig(1, "live", FaultSpecMove)
	tok := func(i int) Token { return Token(int(TokAssistant) + 1 + i%40) }
	prompt := func(n int) []Token {
		p := []Token{TokBOS}
		for i := 1; i < n; i++ {
			p = append(p, tok(i))
		}
		return p
	}
	v := runVictims(t, cfg, func(pub hook.Publisher, setup func(*Engine)) {
		e, err := NewEngine(cfg, pub)
		if err != nil {
			t.Fatal(err)
		}
		setup(e)
		reqs := []Request{{ID: "A", Prompt: prompt(8), MaxNewTokens: 54}}
		for i := 1; i <= 3; i++ {
			reqs = append(reqs, Request{ID: fmt.Sprintf("B%d", i), Prompt: prompt(3000), MaxNewTokens: 60})
		}
		for _, r := range reqs {
			if _, err := e.Submit(r); err != nil {
				t.Fatal(err)
			}
		}
		for e.Step(); !e.Idle(); e.Step() {
			if e.StepNumber() > 10000 {
				t.Fatal("no progress")
			}
		}
	})
	for k := range v.found {
		if !strings.HasSuffix(k, "/B2") && !strings.HasSuffix(k, "/B3") {
			t.Fatalf("victim %s: want B2's or B3's pages (64..127 are theirs)", k)
		}
	}
}

// TestSpecMoveFaultOffByDefault: without the flag or the fault, no draft
// slot is used and the run configuration does not mention speculation.
func TestSpecMoveFaultOffByDefault(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.specTopK() != 0 || cfg.RunConfig().Extra != nil {
		t.Fatalf("default config speculates: topk %d, extra %v", cfg.specTopK(), cfg.RunConfig().Extra)
	}
	cfg.Inject = []string{FaultSpecMove}
	if cfg.specTopK() != 2 || cfg.RunConfig().Extra["speculative_eagle_topk"] != "2" {
		t.Fatalf("spec-move does not imply tree drafting: %d %v", cfg.specTopK(), cfg.RunConfig().Extra)
	}
	cfg.SpeculativeEagleTopK = 17
	if err := cfg.Validate(); err == nil {
		t.Fatal("topk 17 accepted")
	}
}
