package sim

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// collect is a Publisher keeping every event.
type collect struct{ evs []hook.Event }

func (c *collect) Publish(ev hook.Event) { c.evs = append(c.evs, ev) }

// driveEngine runs the default workload shape with sessions×rounds on an
// engine the caller configured, stepping it directly so tests can inspect
// state between steps. after runs after every step.
func driveEngine(t *testing.T, cfg Config, sessions, rounds int, pub hook.Publisher, setup func(e *Engine), after func(e *Engine)) {
	t.Helper()
	e, err := NewEngine(cfg, pub)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(e)
	}
	type st struct {
		s    Script
		hist []Turn
		h    *Handle
		next uint64
		done bool
	}
	ss := make([]*st, sessions)
	for i := range ss {
		ss[i] = &st{s: NewScript(cfg.Seed, i, rounds)}
	}
	for left := sessions; left > 0; {
		for _, s := range ss {
			if s.done || s.h != nil || s.next > e.StepNumber() {
				continue
			}
			sr := s.s.Rounds[min(len(s.hist), len(s.s.Rounds)-1)]
			p, hint := BuildPrompt(s.s.Prefix, s.hist, sr.Expected)
			h, err := e.Submit(Request{ID: fmt.Sprintf("%s-r%d", s.s.Session, len(s.hist)), Session: s.s.Session, Prompt: p, Hint: hint, Expected: sr.Expected})
			if err != nil {
				t.Fatal(err)
			}
			s.h = h
		}
		e.Step()
		if after != nil {
			after(e)
		}
		for _, s := range ss {
			if s.h == nil {
				continue
			}
			select {
			case <-s.h.Done():
			default:
				continue
			}
			c := s.h.Result()
			s.h = nil
			round := len(s.hist)
			sr := s.s.Rounds[min(round, len(s.s.Rounds)-1)]
			s.hist = append(s.hist, Turn{Output: c.Tokens, Result: sr.Result})
			p := ParseDSML(c.Text)
			if testJudge(round, toolRounds(s.s), p.Content, len(p.ToolCalls), c.FinishReason) != "" || len(s.hist) >= rounds {
				s.done = true
				left--
			}
			s.next = e.StepNumber() + 60
		}
		if e.StepNumber() > 100000 {
			t.Fatal("no progress")
		}
	}
}

func quietConfig(seed uint64) Config {
	c := DefaultConfig()
	c.Seed = seed
	c.Instruments = Instruments{}
	return c
}

// TestTransferRaceLandsLate: with transfer-race, a request starts decoding
// while a chunk of its room is still in flight: the decode pages of that
// chunk hold stale bytes at completion (so the decode-side room checksum
// differs from prefill) and the chunk's bytes land later.
func TestTransferRaceLandsLate(t *testing.T) {
	for _, fault := range []bool{false, true} {
		cfg := quietConfig(1)
		cfg.Instruments.Checksum = true
		if fault {
			cfg.Inject = []string{FaultTransferRace}
		}
		var c collect
		late, landedLater := 0, 0
		var pending []*chunk
		pageEq := func(e *Engine, ch *chunk) bool {
			pb := e.dec.L.PageBytes()
			for k := range ch.dst {
				d := e.dec.Buf[int(ch.dst[k])*pb : int(ch.dst[k]+1)*pb]
				s := e.pre.Buf[int(ch.src[k])*pb : int(ch.src[k]+1)*pb]
				if string(d) != string(s) {
					return false
				}
			}
			return true
		}
		// 3 rounds; 2 under -race and -short (minutes under -race; the
		// fault still manifests: the test fails when it does not).
		rounds := 3
		if small() {
			rounds = 2
		}
		driveEngine(t, cfg, faultSessions(), rounds, &c, func(e *Engine) {
			e.testComplete = func(x *transfer) {
				// At completion every chunk should have landed; a late one
				// leaves the previous owner's bytes in its decode pages.
				for i := range x.chunks {
					ch := &x.chunks[i]
					if !ch.landed && !pageEq(e, ch) {
						late++
						pending = append(pending, ch)
					}
				}
			}
		}, func(e *Engine) {
			keep := pending[:0]
			for _, ch := range pending {
				if ch.landed {
					landedLater++
					continue
				}
				keep = append(keep, ch)
			}
			pending = keep
		})
		mismatch := roomMismatches(c.evs)
		if !fault {
			if late != 0 || mismatch != 0 {
				t.Fatalf("without the fault: %d late chunks, %d room mismatches", late, mismatch)
			}
			continue
		}
		if late == 0 || landedLater == 0 || mismatch == 0 {
			t.Fatalf("transfer-race did not manifest: %d late chunks, %d landed later, %d room mismatches", late, landedLater, mismatch)
		}
		t.Logf("transfer-race: %d late chunks (%d landed later), %d rooms mismatched", late, landedLater, mismatch)
	}
}

func roomMismatches(evs []hook.Event) int {
	pre := map[hook.Dec64]hook.Hex64{}
	n := 0
	for _, ev := range evs {
		rc, ok := ev.Body.(*hook.RoomChecksum)
		if !ok || rc.Room == 0 {
			continue
		}
		if rc.Side == hook.SidePrefill {
			pre[rc.Room] = rc.XXH3
		} else if pre[rc.Room] != rc.XXH3 {
			n++
		}
	}
	return n
}

// TestStaleOutLocWritesForeignPage: with stale-outloc, a row vacated by a
// retraction keeps the retracted request's out_loc in the graph's persistent
// input buffer; replays with that row padded store the padding key into a
// page the allocator has since given to another request. Without the fault
// padded rows only ever store to slot 0.
func TestStaleOutLocWritesForeignPage(t *testing.T) {
	for _, fault := range []bool{false, true} {
		cfg := quietConfig(1)
		cfg.TestRetractEvery = 20
		if fault {
			cfg.Inject = []string{FaultStaleOutLoc}
		}
		stale, foreign, verified := 0, 0, 0
		var pending []int
		sessions, rounds := 40, 3
		if small() {
			sessions, rounds = 14, 1 // forced retraction needs bs > 10
		}
		driveEngine(t, cfg, sessions, rounds, nil, func(e *Engine) {
			e.testPadStore = func(slot int, owner int32) {
				stale++
				if owner > 0 {
					foreign++
					pending = append(pending, slot)
				}
			}
		}, func(e *Engine) {
			// Byte level: the foreign slot now holds the padding key.
			ref, _ := NewArena(cfg.IndexKDtype, 2)
			key := make([]float32, HeadDim)
			indexKey(0, TokBOS, key)
			for _, slot := range pending {
				ref.Store(PageTokens+slot%PageTokens, key)
				want := ref.L.TokenBytesAt(ref.Buf, 1, slot%PageTokens)
				got := e.dec.L.TokenBytesAt(e.dec.Buf, uint32(slot/PageTokens), slot%PageTokens)
				if string(got) != string(want) {
					t.Errorf("foreign slot %d does not hold the padding key", slot)
				}
				verified++
			}
			pending = pending[:0]
		})
		if !fault {
			if stale != 0 {
				t.Fatalf("without the fault %d padded-row stores left slot 0", stale)
			}
			continue
		}
		if foreign == 0 || verified == 0 {
			t.Fatalf("stale-outloc did not write a foreign page (%d stale stores)", stale)
		}
		t.Logf("stale-outloc: %d stale stores, %d into pages owned by other requests", stale, foreign)
	}
}

// TestStaleSeqLenNeverSelectsBeyondBakedLength: with stale-seqlen the
// captured graphs' baked length bounds every selection.
func TestStaleSeqLenNeverSelectsBeyondBakedLength(t *testing.T) {
	cfg := quietConfig(1)
	cfg.Inject = []string{FaultStaleSeqLen}
	beyond, checked := 0, 0
	var eng *Engine
	rounds := 3
	if small() {
		rounds = 2 // minutes under -race at 3; requests still outgrow the baked length
	}
	driveEngine(t, cfg, faultSessions(), rounds, nil, func(e *Engine) {
		eng = e
		e.testStore = func(rw *row, _ int32) {
			if rw.limit >= rw.n {
				return
			}
			checked++
			if slices.ContainsFunc(rw.sel, func(p int32) bool { return int(p) >= rw.limit }) || rw.best >= rw.limit {
				beyond++
			}
		}
	}, nil)
	if checked == 0 {
		t.Fatal("stale-seqlen never mattered: no request outgrew its graph's baked length")
	}
	if beyond != 0 {
		t.Fatalf("%d of %d steps selected positions beyond the baked length", beyond, checked)
	}
	baked := 0
	for _, g := range eng.graphs {
		baked = max(baked, g.baked)
	}
	if baked == 0 {
		t.Fatal("no graph baked a length")
	}
	t.Logf("stale-seqlen: %d steps ran with positions hidden beyond the baked length", checked)
}

// TestFaultsManifest: each fault changes outcomes or instruments in a
// 40×3 run with otherwise default flags.
func TestFaultsManifest(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("three full 40×3 runs: skipped under -short and -race (the byte-level tests cover the mechanisms)")
	}
	for _, f := range Faults {
		cfg := DefaultConfig()
		cfg.Inject = []string{f}
		cfg.Instruments = Instruments{Checksum: true, Canary: true, CanaryPolicy: "live"}
		var c collect
		w := testWorkload()
		w.Sessions, w.Rounds = 40, 3
		res, err := Run(context.Background(), cfg, w, &c)
		if err != nil {
			t.Fatal(err)
		}
		switch f {
		case FaultTransferRace:
			if roomMismatches(c.evs) == 0 {
				t.Errorf("%s: no room checksum mismatch", f)
			}
		case FaultStaleOutLoc:
			if foreignWrites(c.evs) == 0 {
				t.Errorf("%s: no page outside the expected write set changed", f)
			}
		case FaultStaleSeqLen:
			if res.Deviated == 0 {
				t.Errorf("%s: no session left its script", f)
			}
		}
		t.Logf("%s: corrupted %d/%d, deviated %d, retractions %d", f, summary(res).CorruptedSessions, res.Sessions, res.Deviated, res.Stats.Retractions)
	}
}

func foreignWrites(evs []hook.Event) int {
	n := 0
	for _, ev := range evs {
		cp, ok := ev.Body.(*hook.CanaryPages)
		if !ok {
			continue
		}
		for _, ch := range cp.Changed {
			if !slices.Contains(cp.Expected, ch.Page) && !slices.Contains(cp.Padding, ch.Page) && !slices.Contains(cp.Transfer, ch.Page) {
				n++
			}
		}
	}
	return n
}

// faultSessions is the byte-level fault tests' session count (smaller under
// the race detector).
func faultSessions() int {
	if small() {
		return 6
	}
	return 40
}
