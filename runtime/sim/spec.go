package sim

import (
	"bytes"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
	"github.com/kvcanary/kvcanary/spec/pagediff"
	"slices"
)

// Speculative decoding moves and the between-phase canary.
//
// With tree drafting (--speculative-eagle-topk k ≥ 2) the verify forward
// writes draft token j of a request at the slot of position committed+j; when
// the accepted token is not tree node 0 its index-K sits in a draft slot and
// SGLang moves it to the slot of its position with
// IndexKeyCache.move(tgt_loc, src_loc) after the forward, before the next one.
// The twin models one accepted token per step: with probability 1-1/k the
// step's store goes to a draft slot a few positions further in the request's
// own last page (scheduleBatch: out_loc is the draft slot), and after the
// replay specMoves copies that token row to the final slot. Correct moves
// leave exactly the arena the baseline has at every position the indexer
// reads, so outputs are unchanged; only the draft slot (beyond the committed
// length) keeps a stale copy until its own position is stored.
//
// The twin calls move once per request. SGLang passes a batch's moves in
// one call; with the spec-move fault a single out-of-range id would fail
// that whole call (see Arena.MovePageRows), hiding the in-range writes the
// canary is meant to catch.

// specState is the engine's speculative-move and between-canary state.
type specState struct {
	tgt, src []int  // this step's moves
	buf      []byte // move scratch

	// The between window: from the last replay's after-snapshot (prevPages,
	// prevDig) to the next replay's before-snapshot.
	prevPages []uint32
	prevDig   []uint64
	haveAfter bool
	dig       []uint64

	// Writes the source knows of in the window: page, owner, and whether the
	// page was slot-checked (move targets) or written whole (prefill, a
	// transfer chunk landing outside a replay).
	known      []uint32
	knownOwner []string
	knownMove  []bool
	unchecked  bool // a known whole-page write was not compared slot by slot
	collateral []hook.PageChange
	rewritten  []uint32

	// Move slot check scratch: target pages before the moves, and the row
	// each move should write.
	snap, want []byte
}

// draftSlots redirects some rows' out_loc to a draft slot (tree drafting):
// the row's position n is accepted from tree node a ≥ 1, written at the slot
// of position n+a in the request's last page. Rows whose position is the
// page's last slot keep their slot (no draft slot left in the page).
func (e *Engine) draftSlots(batch []*request, k int) {
	for _, r := range batch {
		if e.specRng.IntN(k) == 0 {
			continue // tree node 0 accepted: already in place
		}
		n := len(r.tokens)
		room := PageTokens - 1 - n%PageTokens
		if room == 0 {
			continue
		}
		r.outSlot = e.slotOf(r, n+1+e.specRng.IntN(min(k, room)))
	}
}

// specMoves runs this step's moves: final slot ← draft slot, one
// IndexKeyCache.move call per request. With the spec-move fault the move
// indexes the page-indexed arena with the token slot ids (MovePageRows);
// a call with an id beyond the pool fails as torch would and writes nothing.
// With the canary on, every target page is copied before the moves and
// compared slot by slot after them (the source's BEFORE/AFTER hooks on move).
func (e *Engine) specMoves(rows []*row) {
	s := &e.spec
	s.tgt, s.src = s.tgt[:0], s.src[:0]
	for _, rw := range rows {
		if r := rw.r; r.finalSlot != r.outSlot {
			s.tgt = append(s.tgt, r.finalSlot)
			s.src = append(s.src, r.outSlot)
		}
	}
	if len(s.tgt) == 0 {
		return
	}
	check := e.cfg.Instruments.Canary
	pb, tb := e.dec.L.PageBytes(), e.dec.L.TokenBytes()
	if check {
		s.snap, s.want = s.snap[:0], s.want[:0]
		for i, t := range s.tgt {
			pg := t / PageTokens
			s.snap = append(s.snap, e.dec.Buf[pg*pb:(pg+1)*pb]...)
			s.want = e.dec.appendSlot(s.want, s.src[i])
		}
	}
	fault := e.cfg.has(FaultSpecMove)
	for i := range s.tgt {
		e.stats.SpecMoves++
		tgt, src := s.tgt[i:i+1], s.src[i:i+1]
		if !fault {
			s.buf = e.dec.MoveSlots(tgt, src, s.buf)
			continue
		}
		written, buf, err := e.dec.MovePageRows(tgt, src, s.buf)
		s.buf = buf
		if err != nil {
			e.stats.SpecMoveErrors++
			continue
		}
		if e.testMove != nil {
			e.testMove(written)
		}
	}
	if !check {
		return
	}
	for i, t := range s.tgt {
		pg := uint32(t / PageTokens)
		owner := e.reqID(e.decAlloc.Owner(pg))
		before := s.snap[i*pb : (i+1)*pb]
		after := e.dec.Buf[int(pg)*pb : int(pg+1)*pb]
		k0, k1, s0, s1 := e.dec.slotSpans(t % PageTokens)
		want := s.want[i*tb : (i+1)*tb]
		kn := k1 - k0
		tgtChanged := !bytes.Equal(before[k0:k1], after[k0:k1]) || !bytes.Equal(before[s0:s1], after[s0:s1])
		tgtOK := bytes.Equal(after[k0:k1], want[:kn]) && bytes.Equal(after[s0:s1], want[kn:])
		outside := !equalOutside(before, after, k0, k1, s0, s1)
		s.known = append(s.known, pg)
		s.knownOwner = append(s.knownOwner, owner)
		s.knownMove = append(s.knownMove, true)
		switch {
		case outside || (tgtChanged && !tgtOK):
			// Bytes the move had no business changing: judged as if the
			// page were not expected (canary/SPEC.md §2, §7).
			s.collateral = append(s.collateral, hook.PageChange{Page: pg, Owner: owner,
				Before: hook.Hex64(kvlayout.Page(e.dec.L, before, 0)), After: hook.Hex64(kvlayout.Page(e.dec.L, e.dec.Buf, pg))})
		case !tgtChanged && tgtOK:
			s.rewritten = append(s.rewritten, pg) // the slot already held the moved row
		}
		// !tgtChanged && !tgtOK: the move did not land; the page is a
		// missing store for the analyzer.
	}
}

// equalOutside reports whether a and b (one page each) agree outside one
// slot's key bytes [k0, k1) and scale bytes [s0, s1) (empty for bf16).
func equalOutside(a, b []byte, k0, k1, s0, s1 int) bool {
	if !bytes.Equal(a[:k0], b[:k0]) {
		return false
	}
	if s0 == s1 {
		return bytes.Equal(a[k1:], b[k1:])
	}
	return bytes.Equal(a[k1:s0], b[k1:s0]) && bytes.Equal(a[s1:], b[s1:])
}

// knownWrite records whole writes of pages between replays by writers the
// twin knows (a prefill into decode pages without PD, a transfer chunk
// landing in a step without a batch). Nothing is recorded with the canary
// off.
func (e *Engine) knownWrite(pages []uint32, owner string) {
	if !e.cfg.Instruments.Canary || !e.spec.haveAfter {
		return
	}
	s := &e.spec
	for _, p := range pages {
		s.known = append(s.known, p)
		s.knownOwner = append(s.knownOwner, owner)
		s.knownMove = append(s.knownMove, false)
	}
	s.unchecked = true
}

// canaryBetween publishes the between-phase canary.pages of the window that
// ends now, before replay e.replays (canary/SPEC.md §7): the last replay's
// checked pages re-digested and compared with their after-snapshot; the
// expected pages are the known writes of the window that lie in that set;
// running are the requests of the coming step.
func (e *Engine) canaryBetween(running []string, rows []*row) {
	s := &e.spec
	defer s.resetWindow()
	if !s.haveAfter {
		return
	}
	cp := &hook.CanaryPages{Phase: string(pagediff.PhaseBetween), Step: e.replays, Policy: e.policy.String(),
		PagesTotal: e.dec.Pages, PagesChecked: len(s.prevPages), Running: running}
	// Known whole writes: the page's write generation moved since its after
	// digest (a write happened); if its digest did not change, the write put
	// back the bytes it held — an identical rewrite, not a missing store.
	var whole []uint32
	for i, p := range s.known {
		if _, ok := slices.BinarySearch(s.prevPages, p); !ok {
			continue // not digested: cannot be judged, so not listed
		}
		cp.Expected = append(cp.Expected, p)
		cp.ExpectedOwner = append(cp.ExpectedOwner, s.knownOwner[i])
		if !s.knownMove[i] && e.digOK[p] && e.dec.Gen[p] != e.digGen[p] {
			whole = append(whole, p)
		}
	}
	// Digests come through the generation cache. The replay's periodic
	// full re-digest (every canaryVerifyEvery-th replay) is not repeated
	// here — it would double its cost — so a write that bypassed the arena's
	// primitives between replays would surface in the next verification
	// replay instead (as a replay change). Tests that verify every replay
	// (canaryVerify 1) verify this check too.
	s.dig = e.pageDigests(s.prevPages, s.dig[:0], e.canaryVerify == 1)
	e.changed = pagediff.Diff(s.prevDig, s.dig, e.changed[:0])
	for _, i := range e.changed {
		p := s.prevPages[i]
		cp.Changed = append(cp.Changed, hook.PageChange{Page: p, Owner: e.reqID(e.decAlloc.Owner(p)),
			Before: hook.Hex64(s.prevDig[i]), After: hook.Hex64(s.dig[i])})
	}
	for _, p := range whole {
		i, _ := slices.BinarySearch(s.prevPages, p)
		if s.prevDig[i] == s.dig[i] {
			cp.Rewritten = append(cp.Rewritten, p)
		}
	}
	cp.Rewritten = append(cp.Rewritten, s.rewritten...)
	cp.Collateral = slices.Clone(s.collateral)
	cp.SlotChecked = !s.unchecked
	cp.Transfer = e.transferPages(nil)
	for _, rw := range rows {
		cp.LivePages += len(rw.r.pages)
		for _, p := range rw.r.pages {
			if _, ok := slices.BinarySearch(s.prevPages, p); ok {
				cp.LiveChecked++
			}
		}
	}
	e.publish(cp)
}

func (s *specState) resetWindow() {
	s.known, s.knownOwner, s.knownMove = s.known[:0], s.knownOwner[:0], s.knownMove[:0]
	s.collateral, s.rewritten = s.collateral[:0], s.rewritten[:0]
	s.unchecked = false
}
