package sim

import (
	"cmp"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
)

// Decode forward ops, in capture order. The indexer (logits, top-k) is the
// alternate-stream work under multi-stream overlap.
const (
	opQProj   = iota // main: indexer query Q [bs×128 fp32]
	opKVNorm         // main: H = attention prep scratch [bs×512 fp32]
	opLogits         // alt: L = q·K over cached positions [bs×ContextLen bf16]
	opTopK           // alt: T = top-k of L [bs×TopK int32]
	opAttnPre        // main: S = f(H) [bs×512 fp32], reads H
	opAttn           // main: sparse attention over T; reads Q, S, T
	opStore          // main: store the new token's index key at out_loc
	numOps
)

var opNames = [numOps]string{"q_proj", "kv_norm", "indexer_logits", "indexer_topk", "attn_prep", "sparse_attn", "store_index_k"}

// tensor is a temporary of the captured graph.
type tensor struct {
	name        string
	size        int
	first, last int // op indices of the producer and the last consumer
	off         int // placement in the graph arena (planner output)
}

// graphPlan is a captured decode graph for one batch bucket: the op list's
// temporaries placed in a private arena.
type graphPlan struct {
	bucket        int
	arena         []byte
	tensors       []tensor
	q, h, l, t, s int    // indices into tensors (l = -1 when logits are persistent)
	baked         int    // max seq len baked at capture (stale-seqlen fault), 0 when dynamic
	outLoc        []int  // persistent out_cache_loc input buffer, one per row
	stale         []bool // rows whose out_loc was not reset when vacated (stale-outloc)
}

const planAlign = 256

// planGraph captures the decode forward for bucket rows. Lifetimes are taken
// in capture order as if every op ran on one stream: a temporary's bytes are
// free for reuse once the op that last reads it has been captured. With
// bf16 index-K the indexer's logits are such a temporary; the fp8 path
// writes logits to a persistent buffer outside the graph arena (deep_gemm's
// paged MQA logits), so they are never planned here.
func planGraph(bucket int, fp8 bool) *graphPlan {
	g := &graphPlan{bucket: bucket, l: -1}
	add := func(name string, size, first, last int) int {
		g.tensors = append(g.tensors, tensor{name: name, size: size, first: first, last: last})
		return len(g.tensors) - 1
	}
	g.q = add("q", bucket*HeadDim*4, opQProj, opAttn)
	g.h = add("h", bucket*hiddenRow*4, opKVNorm, opAttnPre)
	if !fp8 {
		g.l = add("logits", bucket*ContextLen*2, opLogits, opTopK)
	}
	g.t = add("topk", bucket*TopK*4, opTopK, opAttn)
	g.s = add("s", bucket*hiddenRow*4, opAttnPre, opAttn)

	// First-fit planner over free extents, freeing after each op's last use.
	type extent struct{ off, size int }
	var free []extent
	top := 0
	alloc := func(size int) int {
		size = (size + planAlign - 1) &^ (planAlign - 1)
		for i, e := range free {
			if e.size >= size {
				free[i].off += size
				free[i].size -= size
				if free[i].size == 0 {
					free = slices.Delete(free, i, i+1)
				}
				return e.off
			}
		}
		off := top
		top += size
		return off
	}
	release := func(off, size int) {
		size = (size + planAlign - 1) &^ (planAlign - 1)
		free = append(free, extent{off, size})
		slices.SortFunc(free, func(a, b extent) int { return cmp.Compare(a.off, b.off) })
		merged := free[:0]
		for _, e := range free {
			if n := len(merged); n > 0 && merged[n-1].off+merged[n-1].size == e.off {
				merged[n-1].size += e.size
				continue
			}
			merged = append(merged, e)
		}
		free = merged
	}
	for op := range numOps {
		for i := range g.tensors {
			if g.tensors[i].first == op {
				g.tensors[i].off = alloc(g.tensors[i].size)
			}
		}
		for i := range g.tensors {
			if g.tensors[i].last == op {
				release(g.tensors[i].off, g.tensors[i].size)
			}
		}
	}
	g.arena = make([]byte, top)
	g.outLoc = make([]int, bucket)
	g.stale = make([]bool, bucket)
	return g
}

// overlaps reports whether two planned tensors share bytes.
func (g *graphPlan) overlaps(a, b int) bool {
	if a < 0 || b < 0 {
		return false
	}
	ta, tb := g.tensors[a], g.tensors[b]
	return ta.off < tb.off+tb.size && tb.off < ta.off+ta.size
}

// unit is one row of one op on one stream: the interleaving granularity.
type unit struct {
	t      float64
	stream int // 0 main, 1 alternate
	seq    int // program order within the stream
	op     int
	row    int
}

// Stream timing physics (arbitrary time units). Per-row costs of the ops
// that run concurrently under overlap, and the spread of each stream's speed
// from one replay to the next (SM contention, clocks).
const (
	costKVNorm   = 1.0  // per row
	costAttnPre  = 0.25 // per row
	costLogits   = 0.5  // per row per 2048 cached positions
	costTopK     = 0.1  // per row per 2048 cached positions
	altLaunch    = 0.05 // alternate stream's event-wait latency
	topkWait     = 0.2  // mean wait between a row's logits landing and its top-k reading them
	streamJitter = 0.22 // σ of a stream's log speed factor per replay
	unitJitter   = 0.10 // σ of one row's relative duration
)

// schedule returns the replay's units in execution order. Under multi-stream
// overlap the two streams' rows interleave by simulated time drawn from rng
// (deterministic given the replay's seed); otherwise every op runs on the
// main stream in capture order.
func schedule(rows int, seqs []int, overlap bool, rng *rand.Rand, dst []unit) []unit {
	dst = dst[:0]
	xm := math.Exp(streamJitter * rng.NormFloat64())
	xa := math.Exp(streamJitter * rng.NormFloat64())
	dur := func(c, x float64) float64 { return c * x * math.Exp(unitJitter*rng.NormFloat64()) }
	seqCost := func(r int) float64 { return float64(max(seqs[r], 1)) / 2048 }
	if !overlap {
		t := 0.0
		seq := 0
		for _, op := range []int{opKVNorm, opLogits, opTopK, opAttnPre} {
			for r := range rows {
				dst = append(dst, unit{t: t, op: op, row: r, seq: seq})
				seq++
				t += 1
			}
		}
		return dst
	}
	t := 0.0
	seq := 0
	for r := range rows {
		dst = append(dst, unit{t: t, op: opKVNorm, row: r, seq: seq})
		seq++
		t += dur(costKVNorm, xm)
	}
	for r := range rows {
		dst = append(dst, unit{t: t, op: opAttnPre, row: r, seq: seq})
		seq++
		t += dur(costAttnPre, xm)
	}
	// The indexer consumes rows as a pipeline: a row's top-k starts once its
	// logits are complete and its ready flag is observed (a short, variable
	// wait), then the next row's logits run.
	t = altLaunch * xa
	seq = 0
	for r := range rows {
		t += dur(costLogits*seqCost(r), xa) // a row's logits land when its work is done
		dst = append(dst, unit{t: t, stream: 1, op: opLogits, row: r, seq: seq})
		seq++
		t += topkWait * xa * rng.ExpFloat64()
		dst = append(dst, unit{t: t, stream: 1, op: opTopK, row: r, seq: seq})
		seq++
		t += dur(costTopK*seqCost(r), xa)
	}
	slices.SortStableFunc(dst, func(a, b unit) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		if c := cmp.Compare(a.stream, b.stream); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	return dst
}

// activation is the main stream's per-row scratch value (a stand-in for
// normalized hidden states): deterministic in request, step and index.
func activation(seed uint64, i int) float32 {
	z := seed + uint64(i)*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return float32(int32(z>>32)) / (1 << 31) * 2.5
}

func putF32(b []byte, v float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(v)) }
func getF32(b []byte) float32    { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }
