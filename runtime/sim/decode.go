package sim

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
	"github.com/kvcanary/kvcanary/spec/pagediff"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
)

// row is one batch row's inputs and results for a decode step.
type row struct {
	r      *request
	n      int // cached positions 0..n-1
	limit  int // positions the indexer scores (n, or a baked length)
	q      [HeadDim]float32
	logits []float32 // indexer logits as computed (before any hazard)
	seen   []float32 // logits as the top-k op read them
	sel    []int32   // selected positions, best first
	best   int
	tok    Token
	sample bool
	eager  []float32
	selE   []int32
}

func (e *Engine) workers() int {
	if e.cfg.Workers > 0 {
		return e.cfg.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// parallel runs fn(i) for i in [0, n) on a fixed set of workers. Each call
// touches only row i's state, so results never depend on scheduling.
func (e *Engine) parallel(n int, fn func(i int)) {
	w := min(e.workers(), n)
	if w <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	for k := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; i < n; i += w {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

func (e *Engine) bucketFor(bs int) int {
	for _, b := range e.buckets {
		if b >= bs {
			return b
		}
	}
	return 0
}

// graphFor returns bucket's captured graph, capturing it on first use.
func (e *Engine) graphFor(bucket int, rows []*row) *graphPlan {
	g := e.graphs[bucket]
	if g == nil {
		g = planGraph(bucket, e.dec.fp8())
		if e.cfg.has(FaultStaleSeqLen) {
			// The indexer's grid is sized from the max seq len seen at capture
			// and baked into the graph as a constant.
			for _, rw := range rows {
				g.baked = max(g.baked, rw.n)
			}
			g.baked = pagesFor(g.baked) * PageTokens
		}
		e.graphs[bucket] = g
	}
	return g
}

// scoreRow computes the indexer logits of positions [0, limit) into dst.
func (e *Engine) scoreRow(rw *row, eager bool, dst []float32) []float32 {
	dst = slices.Grow(dst[:0], rw.limit)[:rw.limit]
	pages := rw.r.pages
	for pos := 0; pos < rw.limit; pos++ {
		slot := int(pages[pos/PageTokens])*PageTokens + pos%PageTokens
		dst[pos] = e.dec.dot(slot, rw.q[:], eager)
	}
	return dst
}

// bf16Round rounds logits to bf16 in place (the bf16 indexer writes bf16).
func bf16Round(v []float32) {
	for i, x := range v {
		v[i] = BF16ToFloat32(BF16FromFloat32(x))
	}
}

// topK returns the k positions with the largest logits, best first; NaN
// ranks above everything (as torch.topk does), ties go to the lower position.
func topK(logits []float32, k int, dst []int32) []int32 {
	dst = dst[:0]
	better := func(a, b int32) bool {
		va, vb := logits[a], logits[b]
		na, nb := va != va, vb != vb
		switch {
		case na && !nb:
			return true
		case nb && !na:
			return false
		case !na && va != vb:
			return va > vb
		}
		return a < b
	}
	// Min-heap of the best k so far (root = worst of them).
	down := func(h []int32, i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			m := l
			if r := l + 1; r < len(h) && better(h[l], h[r]) {
				m = r
			}
			if !better(h[i], h[m]) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for p := range int32(len(logits)) {
		if len(dst) < k {
			dst = append(dst, p)
			for i := len(dst) - 1; i > 0; {
				par := (i - 1) / 2
				if !better(dst[par], dst[i]) {
					break
				}
				dst[par], dst[i] = dst[i], dst[par]
				i = par
			}
			continue
		}
		if better(p, dst[0]) {
			dst[0] = p
			down(dst, 0)
		}
	}
	slices.SortFunc(dst, func(a, b int32) int {
		if better(a, b) {
			return -1
		}
		if better(b, a) {
			return 1
		}
		return 0
	})
	return dst
}

// attend is the sparse attention over the selected positions: exact fp32
// scores against the keys in the arena; the best position is copied.
func (e *Engine) attend(rw *row, eager bool) {
	pages := rw.r.pages
	best, bestScore := -1, float32(math.Inf(-1))
	for _, p := range rw.sel {
		pos := int(p)
		slot := int(pages[pos/PageTokens])*PageTokens + pos%PageTokens
		s := e.dec.dot(slot, rw.q[:], eager)
		if best < 0 || s > bestScore || (s == bestScore && pos < best) {
			best, bestScore = pos, s
		}
	}
	if best < 0 {
		best = rw.n - 1
	}
	rw.best = best
	rw.tok = rw.r.tokens[best]
}

// decode runs one decode step over batch:
// captured replay or eager forward, the transfer engine landing chunks
// meanwhile, the index-K stores at out_loc, and request bookkeeping.
func (e *Engine) decode(batch []*request) []Completion {
	e.replays++
	rows := make([]*row, 0, len(batch))
	for _, r := range batch {
		rw := &row{r: r, n: len(r.tokens)}
		rows = append(rows, rw)
	}
	bs := len(rows)
	bucket := 0
	if !e.cfg.DisableCUDAGraph && bs <= e.cfg.CUDAGraphMaxBS {
		bucket = e.bucketFor(bs)
	}
	var g *graphPlan
	if bucket > 0 {
		g = e.graphFor(bucket, rows)
	}
	for _, rw := range rows {
		rw.limit = rw.n
		if g != nil && g.baked > 0 {
			rw.limit = min(rw.n, g.baked)
		}
		indexQuery(rw.r.ptr, rw.q[:])
	}

	// Canary: digest the pages the policy selects before the replay.
	var cp *hook.CanaryPages
	var checkPages []uint32
	if e.cfg.Instruments.Canary {
		cp, checkPages = e.canaryBefore(rows, bucket)
	}

	mode := "eager"
	if g != nil {
		mode = "graph"
		e.stats.GraphReplays++
		e.replayGraph(g, rows)
	} else {
		e.stats.EagerSteps++
		e.parallel(bs, func(i int) {
			rw := rows[i]
			rw.logits = e.scoreRow(rw, true, rw.logits)
			if !e.dec.fp8() {
				bf16Round(rw.logits)
			}
			rw.seen = rw.logits
			rw.sel = topK(rw.seen, TopK, rw.sel)
			e.attend(rw, true)
		})
	}
	if g != nil && e.cfg.Instruments.GraphDiff {
		e.graphDiff(rows)
	}
	// The transfer engine lands due chunks while the step runs.
	e.landChunks(true)
	// store_index_k: every row's new key at its out_loc; padded rows at slot 0.
	for _, rw := range rows {
		indexKey(rw.n, rw.tok, e.keyBuf)
		if e.testStore != nil {
			e.testStore(rw, e.decAlloc.Owner(uint32(rw.r.outSlot/PageTokens)))
		}
		e.dec.Store(rw.r.outSlot, e.keyBuf)
		if cp != nil {
			e.slotKeys = e.dec.appendSlot(e.slotKeys, rw.r.outSlot)
		}
	}
	if g != nil {
		// Padded rows store the padding key at their out_loc: slot 0, unless
		// the row's persistent out_loc went stale.
		indexKey(0, TokBOS, e.keyBuf)
		for r := bs; r < g.bucket; r++ {
			slot := g.outLoc[r]
			if slot != 0 && e.testPadStore != nil {
				e.testPadStore(slot, e.decAlloc.Owner(uint32(slot/PageTokens)))
			}
			e.dec.Store(slot, e.keyBuf)
		}
		e.lastBucket = bucket
	}
	if cp != nil {
		e.canaryAfter(cp, checkPages, rows)
	}
	if e.cfg.Instruments.Replay {
		e.publish(&hook.Replay{Step: e.replays, BatchSize: bs, Bucket: bucket, Mode: mode, DurNS: int64(StepTime)})
	}
	// Speculative decoding: accepted tokens verified in a draft slot move to
	// their final slot before the next step (outside any replay).
	e.specMoves(rows)

	// Bookkeeping: append tokens, finish requests.
	var done []Completion
	keep := e.running[:0]
	for _, rw := range rows {
		r := rw.r
		r.tokens = append(r.tokens, rw.tok)
		r.ptr = rw.best
		r.nGen++
		e.stats.DecodeTokens++
		switch {
		case rw.tok == TokEOS:
			done = append(done, e.finish(r, "stop", ""))
		case r.nGen >= r.MaxNewTokens || len(r.tokens)+1 >= ContextLen:
			done = append(done, e.finish(r, "length", ""))
		default:
			keep = append(keep, r)
		}
	}
	e.running = keep
	return done
}

// replayGraph replays a captured graph: rows' work on the main and the
// alternate stream interleaves at row granularity by the seeded scheduler,
// with every temporary at its planned offset in the graph arena.
func (e *Engine) replayGraph(g *graphPlan, rows []*row) {
	bs := len(rows)
	fp8 := e.dec.fp8()
	a := g.arena
	qOff, hOff, sOff := g.tensors[g.q].off, g.tensors[g.h].off, g.tensors[g.s].off
	// q_proj (main, before the alternate stream forks).
	for r := range g.bucket {
		for i := range HeadDim {
			v := float32(0)
			if r < bs {
				v = rows[r].q[i]
			}
			putF32(a[qOff+(r*HeadDim+i)*4:], v)
		}
		switch {
		case r < bs:
			g.outLoc[r] = rows[r].r.outSlot
			g.stale[r] = false
		case !g.stale[r]:
			g.outLoc[r] = 0
		}
	}
	// The indexer reads Q from the graph arena; its arithmetic is
	// independent of the interleaving, so rows are computed in parallel and
	// their results written at the moment their unit runs.
	e.parallel(bs, func(r int) {
		rw := rows[r]
		for i := range HeadDim {
			rw.q[i] = getF32(a[qOff+(r*HeadDim+i)*4:])
		}
		rw.logits = e.scoreRow(rw, false, rw.logits)
	})
	seqs := make([]int, g.bucket)
	for r := range bs {
		seqs[r] = rows[r].limit
	}
	seed := e.cfg.Seed*0x9E3779B97F4A7C15 ^ e.replays
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	e.units = schedule(g.bucket, seqs, e.cfg.MultiStreamOverlap, rng, e.units)
	lOff := -1
	if g.l >= 0 {
		lOff = g.tensors[g.l].off
	}
	rowBytes := ContextLen * 2
	for _, u := range e.units {
		r := u.row
		switch u.op {
		case opKVNorm:
			base := hOff + r*hiddenRow*4
			hs := uint64(r)<<40 ^ e.replays<<8 ^ e.cfg.Seed
			for i := range hiddenRow {
				putF32(a[base+i*4:], activation(hs, i))
			}
		case opAttnPre:
			hb, sb := hOff+r*hiddenRow*4, sOff+r*hiddenRow*4
			for i := range hiddenRow {
				putF32(a[sb+i*4:], getF32(a[hb+i*4:])*1.25+0.5)
			}
		case opLogits:
			if r >= bs {
				continue
			}
			if fp8 {
				continue // persistent fp32 buffer outside the graph arena
			}
			base := lOff + r*rowBytes
			for p, v := range rows[r].logits {
				binary.LittleEndian.PutUint16(a[base+2*p:], BF16FromFloat32(v))
			}
		case opTopK:
			if r >= bs {
				continue
			}
			rw := rows[r]
			if fp8 {
				rw.seen = rw.logits
				continue
			}
			base := lOff + r*rowBytes
			rw.seen = slices.Grow(rw.seen[:0], rw.limit)[:rw.limit]
			for p := range rw.limit {
				rw.seen[p] = BF16ToFloat32(binary.LittleEndian.Uint16(a[base+2*p:]))
			}
		}
	}
	e.parallel(bs, func(r int) {
		rw := rows[r]
		rw.sel = topK(rw.seen, TopK, rw.sel)
		e.attend(rw, false)
	})
}

// graphDiff reruns the sampled rows' indexer eagerly from the same inputs
// (query and index-K arena) and publishes both sides.
func (e *Engine) graphDiff(rows []*row) {
	every := uint64(e.cfg.Instruments.GraphDiffEvery)
	any := false
	for _, rw := range rows {
		rw.sample = e.replays%every == 0 || e.flagged[rw.r.Session]
		any = any || rw.sample
	}
	if !any {
		return
	}
	fp8 := e.dec.fp8()
	e.parallel(len(rows), func(i int) {
		rw := rows[i]
		if !rw.sample {
			return
		}
		full := *rw
		full.limit = rw.n
		rw.eager = e.scoreRow(&full, true, rw.eager)
		if !fp8 {
			bf16Round(rw.eager)
		}
		rw.selE = topK(rw.eager, TopK, rw.selE)
	})
	dtype := "bf16"
	if fp8 {
		dtype = "fp32"
	}
	for _, rw := range rows {
		if !rw.sample {
			continue
		}
		s := &hook.GraphDiffSample{Step: e.replays, Request: rw.r.ID, Session: rw.r.Session, Dtype: dtype,
			TopKGraph: slices.Clone(rw.sel), TopKEager: slices.Clone(rw.selE), K: TopK, SeqLen: rw.n}
		if !e.cfg.Instruments.GraphDiffTopKOnly {
			e.gdSamples++
			if e.sampleRows(rw) {
				gv := make(hook.Float32s, rw.n)
				copy(gv, rw.seen)
				for p := len(rw.seen); p < rw.n; p++ {
					gv[p] = float32(math.Inf(-1))
				}
				s.Graph = gv
				s.Eager = slices.Clone(hook.Float32s(rw.eager))
			}
		}
		if !slices.Equal(rw.sel, rw.selE) && rw.r.Session != "" {
			e.flagged[rw.r.Session] = true
		}
		e.publish(s)
	}
}

// sampleRows reports whether a graph-vs-eager sample carries its logit rows
// (the emission policy of Instruments.GraphDiffVectorsEvery): on every Nth
// sample, and whenever the two sides differ in what a selection-only sample
// cannot show — the selections (a flagged step), the length, the argmax, or
// a non-finite logit. A flagged session's other steps are sampled (as
// before) but carry their selections only. The rest carry their selections only: rows that agree on
// all of that differ at most by rounding, which the graphdiff policy judges
// within tolerance (a source does not judge; this only keeps every row a
// judgement could turn on).
func (e *Engine) sampleRows(rw *row) bool {
	n := e.cfg.Instruments.GraphDiffVectorsEvery
	if n <= 1 || e.gdSamples%uint64(n) == 1 {
		return true
	}
	if !slices.Equal(rw.sel, rw.selE) || len(rw.eager) != rw.n || len(rw.seen) != rw.n {
		return true
	}
	ag, ae := -1, -1
	for i, v := range rw.seen {
		w := rw.eager[i]
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) {
			return true
		}
		if ag < 0 || v > rw.seen[ag] {
			ag = i
		}
		if ae < 0 || w > rw.eager[ae] {
			ae = i
		}
	}
	return ag != ae
}

// canaryBefore builds the replay's canary context and digests the pages the
// policy selects.
func (e *Engine) canaryBefore(rows []*row, bucket int) (*hook.CanaryPages, []uint32) {
	cp := &hook.CanaryPages{Step: e.replays, Policy: e.policy.String(), PagesTotal: e.dec.Pages}
	cp.Running = make([]string, 0, len(rows))
	for _, rw := range rows {
		cp.Running = append(cp.Running, rw.r.ID)
	}
	// Writers outside a replay: compare the last replay's after-snapshot
	// with the pages as they are now (canary/SPEC.md §7).
	e.canaryBetween(cp.Running, rows)
	live := e.pgBuf[:0]
	for _, rw := range rows {
		live = append(live, rw.r.pages...)
		cp.LivePages += len(rw.r.pages)
		cp.Expected = append(cp.Expected, uint32(rw.r.outSlot/PageTokens))
		cp.ExpectedOwner = append(cp.ExpectedOwner, rw.r.ID)
	}
	if bucket > len(rows) {
		cp.Padding = []uint32{0}
		live = append(live, 0)
	}
	n := len(live)
	live = e.transferPages(live)
	cp.Transfer = slices.Clone(live[n:])
	pages := e.policy.PagesToCheck(e.replays, live, e.dec.Pages, nil)
	e.pgBuf = live
	cp.PagesChecked = len(pages)
	cp.LiveChecked = cp.LivePages // every built-in policy digests all live pages
	e.digA = e.pageDigests(pages, e.digA[:0], false)
	e.slotSnapshot(rows)
	return cp, pages
}

// slotSnapshot copies the step's expected pages (the pages of the rows'
// out_loc, from the allocator's bookkeeping) before the replay, so that
// slotCheck can compare them slot by slot afterwards. Only these few pages
// are copied: bs pages per step, not the live set.
func (e *Engine) slotSnapshot(rows []*row) {
	e.slotRows = e.slotRows[:0]
	for i := range rows {
		e.slotRows = append(e.slotRows, int32(i))
	}
	slices.SortFunc(e.slotRows, func(a, b int32) int { return cmp.Compare(rows[a].r.outSlot, rows[b].r.outSlot) })
	pb := e.dec.L.PageBytes()
	e.slotSnap = e.slotSnap[:0]
	e.slotKeys = e.slotKeys[:0]
	prev := -1
	for _, i := range e.slotRows {
		pg := rows[i].r.outSlot / PageTokens
		if pg != prev {
			e.slotSnap = append(e.slotSnap, e.dec.Buf[pg*pb:(pg+1)*pb]...)
			prev = pg
		}
	}
}

// slotCheck compares each expected page with its copy from before the
// replay (canary/SPEC.md §2). Bytes outside the slots stored this step that
// changed, or a stored slot that no longer holds what its row stored (a
// later write landed on it), make the page collateral; a page whose digest
// did not change although every store on it landed is rewritten (the store
// wrote the bytes the slot already held). pages, digA and digB are the
// digested pages (sorted) and their digests before and after.
func (e *Engine) slotCheck(cp *hook.CanaryPages, pages []uint32, rows []*row) {
	pb, tb := e.dec.L.PageBytes(), e.dec.L.TokenBytes()
	snap := 0
	for k := 0; k < len(e.slotRows); {
		pg := rows[e.slotRows[k]].r.outSlot / PageTokens
		before := e.slotSnap[snap*pb : (snap+1)*pb]
		after := e.dec.Buf[pg*pb : (pg+1)*pb]
		snap++
		var stored uint64 // slots of pg stored this step
		collateral := false
		for ; k < len(e.slotRows) && rows[e.slotRows[k]].r.outSlot/PageTokens == pg; k++ {
			i := int(e.slotRows[k])
			off := rows[i].r.outSlot % PageTokens
			stored |= 1 << off
			k0, k1, s0, s1 := e.dec.slotSpans(off)
			want := e.slotKeys[i*tb : (i+1)*tb]
			kn := k1 - k0
			if !bytes.Equal(after[k0:k1], want[:kn]) || !bytes.Equal(after[s0:s1], want[kn:kn+s1-s0]) {
				collateral = true
			}
		}
		// Compare the runs of slots not stored this step.
		for a := 0; a < PageTokens && !collateral; {
			if stored&(1<<a) != 0 {
				a++
				continue
			}
			b := a + 1
			for b < PageTokens && stored&(1<<b) == 0 {
				b++
			}
			k0, _, s0, _ := e.dec.slotSpans(a)
			_, k1, _, s1 := e.dec.slotSpans(b - 1)
			collateral = !bytes.Equal(before[k0:k1], after[k0:k1]) || !bytes.Equal(before[s0:s1], after[s0:s1])
			a = b
		}
		var dA, dB uint64
		if i, ok := slices.BinarySearch(pages, uint32(pg)); ok {
			dA, dB = e.digA[i], e.digB[i]
		} else {
			// Not digested (no built-in policy skips an expected page).
			dA, dB = kvlayout.Page(e.dec.L, before, 0), kvlayout.Page(e.dec.L, after, 0)
		}
		switch {
		case collateral:
			cp.Collateral = append(cp.Collateral, hook.PageChange{Page: uint32(pg), Owner: e.reqID(e.decAlloc.Owner(uint32(pg))),
				Before: hook.Hex64(dA), After: hook.Hex64(dB)})
		case dA == dB:
			cp.Rewritten = append(cp.Rewritten, uint32(pg))
		}
	}
	cp.SlotChecked = true
}

// canaryVerifyEvery is how often the canary re-digests every page it checks
// instead of trusting the arena's write generations.
const canaryVerifyEvery = 32

// pageDigests appends the digest of every page: from the cache when the
// page's write generation has not moved since it was digested (and this is
// not a verification replay), freshly computed otherwise.
func (e *Engine) pageDigests(pages []uint32, dst []uint64, verify bool) []uint64 {
	if e.digCache == nil {
		e.digCache = make([]uint64, e.dec.Pages)
		e.digGen = make([]uint32, e.dec.Pages)
		e.digOK = make([]bool, e.dec.Pages)
	}
	for _, p := range pages {
		if !verify && e.digOK[p] && e.digGen[p] == e.dec.Gen[p] {
			dst = append(dst, e.digCache[p])
			continue
		}
		d := kvlayout.Page(e.dec.L, e.dec.Buf, p)
		e.digCache[p], e.digGen[p], e.digOK[p] = d, e.dec.Gen[p], true
		dst = append(dst, d)
	}
	return dst
}

func (e *Engine) canaryAfter(cp *hook.CanaryPages, pages []uint32, rows []*row) {
	e.digB = e.pageDigests(pages, e.digB[:0], e.replays%uint64(e.canaryVerify) == 0)
	e.changed = pagediff.Diff(e.digA, e.digB, e.changed[:0])
	e.slotCheck(cp, pages, rows)
	for _, i := range e.changed {
		p := pages[i]
		cp.Changed = append(cp.Changed, hook.PageChange{Page: p, Owner: e.reqID(e.decAlloc.Owner(p)),
			Before: hook.Hex64(e.digA[i]), After: hook.Hex64(e.digB[i])})
	}
	e.publish(cp)
	// The after-snapshot the next between-phase check starts from.
	e.spec.prevPages = pages
	e.spec.prevDig = append(e.spec.prevDig[:0], e.digB...)
	e.spec.haveAfter = true
}
