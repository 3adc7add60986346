package graphdiff

import (
	"math"
	"math/bits"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// DefaultK is the selection size used when neither the caller nor the sample
// names one: DeepSeek's sparse-attention indexer keeps the top 2048 positions.
const DefaultK = 2048

// Options steer Compare.
type Options struct {
	// K is the top-k size. 0 means DefaultK. It is clamped to the vector length.
	K int
	// Dtype is the dtype of the logits' producer ("fp32", "bf16", "fp16",
	// "fp8"); it picks the tolerance. Empty or unknown means fp32.
	Dtype string
	// Tol, when non-nil, replaces ToleranceFor(Dtype, n).
	Tol *Tolerance
	// NoKL skips the KL divergence (the most expensive metric; meaningless for
	// index logits that are never softmaxed).
	NoKL bool
}

// Result is every metric of one graph-vs-eager pair and the verdict.
//
// Float metrics cover the positions where both sides are finite; positions
// where exactly one side is non-finite, or both are but of different kinds
// (NaN against Inf, +Inf against -Inf), are counted in NonFinite instead. NaN
// on both sides, or the same infinity on both sides, is equal.
type Result struct {
	N        int `json:"n"`                   // compared length (the shorter one on a length mismatch)
	LenGraph int `json:"len_graph,omitempty"` // set on a length mismatch
	LenEager int `json:"len_eager,omitempty"`

	MaxAbsDiff   float64 `json:"max_abs_diff"`
	MaxAbsDiffAt int     `json:"max_abs_diff_at"` // -1 when no finite pair differs
	MeanAbsDiff  float64 `json:"mean_abs_diff"`
	RelRMSE      float64 `json:"rel_rmse"` // rms(g-e) / rms(e); 0 when both are 0, 1 when only e is
	Cosine       float64 `json:"cosine"`   // 1 when both are all zero, 0 when only one is
	NonFinite    int     `json:"nonfinite_mismatch"`
	MaskedGraph  int     `json:"masked_graph,omitempty"` // of NonFinite: -Inf (masked) in the graph where eager is finite
	MaskedEager  int     `json:"masked_eager,omitempty"` // of NonFinite: -Inf in eager where the graph is finite
	NotClose     int     `json:"not_close"`              // entries outside ATol + RTol·|e|

	ArgmaxGraph int  `json:"argmax_graph"` // -1 when no finite entry
	ArgmaxEager int  `json:"argmax_eager"`
	ArgmaxAgree bool `json:"argmax_agree"`

	K             int     `json:"k"`
	TopKJaccard   float64 `json:"topk_jaccard"`
	FirstDiffRank int     `json:"first_diff_rank"`   // -1 when the selections agree in order
	Missing       []int32 `json:"missing,omitempty"` // selected by eager, not by the graph
	Extra         []int32 `json:"extra,omitempty"`   // selected by the graph, not by eager
	SelGraph      []int32 `json:"-"`                 // the selections compared; from a Comparer, valid until its next call
	SelEager      []int32 `json:"-"`

	KL      float64 `json:"kl"`       // KL(softmax(eager) ‖ softmax(graph)), nats
	KLValid bool    `json:"kl_valid"` // false when skipped, undefined (non-finite mismatch) or overflowing; KL is then 0

	HasRef       bool    `json:"has_ref"`
	GraphRefRMSE float64 `json:"graph_ref_rmse,omitempty"`
	EagerRefRMSE float64 `json:"eager_ref_rmse,omitempty"`

	Tol       Tolerance `json:"tolerance"`
	AllClose  bool      `json:"allclose"`
	Divergent bool      `json:"divergent"`
	Reason    string    `json:"reason,omitempty"` // Reason* constant when divergent
}

// Compare computes every metric of graph against eager (and against ref, a
// float64-accumulated reference rounded to float32, when non-nil), with the
// top-k selections taken from the vectors, and decides divergence by the policy
// in SPEC.md. It never panics; inputs are not modified.
func Compare(graph, eager, ref []float32, opts Options) Result {
	var c Comparer
	return c.Compare(graph, eager, ref, nil, nil, opts)
}

// CompareSample judges one graphdiff.sample: its dtype and k override the
// options' when set, and its selections, when both are present, are the ones
// compared (they are what the step used).
func CompareSample(s *hook.GraphDiffSample, opts Options) Result {
	var c Comparer
	return c.CompareSample(s, opts)
}

// Comparer is Compare with reusable scratch buffers; the zero value is ready.
// A Comparer is not safe for concurrent use.
type Comparer struct {
	tk         topkScratch
	selG, selE []int32
	setA, setB []int32
	bmA, bmB   []uint64
}

// CompareSample is the package CompareSample on c's buffers.
func (c *Comparer) CompareSample(s *hook.GraphDiffSample, opts Options) Result {
	if s.Dtype != "" {
		opts.Dtype = s.Dtype
	}
	if s.K > 0 {
		opts.K = s.K
	} else if opts.K == 0 && len(s.TopKEager) > 0 {
		opts.K = len(s.TopKEager)
	}
	var sg, se []int32
	if len(s.TopKGraph) > 0 || len(s.TopKEager) > 0 {
		sg, se = s.TopKGraph, s.TopKEager
		if sg == nil {
			sg = []int32{}
		}
		if se == nil {
			se = []int32{}
		}
	}
	return c.Compare(s.Graph, s.Eager, s.Ref, sg, se, opts)
}

// Compare is the package Compare, except that non-nil selGraph and selEager are
// used as the two sides' selections instead of the vectors' top-k.
func (c *Comparer) Compare(graph, eager, ref []float32, selGraph, selEager []int32, opts Options) Result {
	n := min(len(graph), len(eager))
	r := Result{N: n, MaxAbsDiffAt: -1, ArgmaxGraph: -1, ArgmaxEager: -1, FirstDiffRank: -1, TopKJaccard: 1, Cosine: 1}
	if len(graph) != len(eager) {
		r.LenGraph, r.LenEager = len(graph), len(eager)
	}
	if opts.Tol != nil {
		r.Tol = *opts.Tol
	} else {
		r.Tol = ToleranceFor(opts.Dtype, n)
	}
	g, e := graph[:n], eager[:n]

	st := pairPass(g, e, r.Tol)
	r.MaxAbsDiff, r.MaxAbsDiffAt = st.maxAbs, st.maxAt
	r.NonFinite, r.NotClose = st.nonFinite, st.notClose
	r.MaskedGraph, r.MaskedEager = st.maskedG, st.maskedE
	if st.finite > 0 {
		r.MeanAbsDiff = st.sumAbs / float64(st.finite)
	}
	switch {
	case st.ee > 0:
		r.RelRMSE = math.Sqrt(st.dd / st.ee)
	case st.dd > 0:
		r.RelRMSE = 1
	}
	switch {
	case st.ee > 0 && st.gg > 0:
		r.Cosine = st.ge / (math.Sqrt(st.ee) * math.Sqrt(st.gg))
		r.Cosine = math.Max(-1, math.Min(1, r.Cosine))
	case st.ee > 0 || st.gg > 0:
		r.Cosine = 0
	}

	// Selections: the ones the step used when given, else the vectors' top-k.
	k := opts.K
	if k <= 0 {
		k = DefaultK
	}
	if n > 0 && k > n {
		k = n
	}
	if selGraph != nil && selEager != nil {
		r.SelGraph, r.SelEager = selGraph, selEager
		if len(selEager) > 0 {
			k = len(selEager)
		}
		r.ArgmaxGraph, r.ArgmaxEager = argmax(g), argmax(e)
	} else {
		c.selG = c.tk.topK(g, k, c.selG)
		c.selE = c.tk.topK(e, k, c.selE)
		r.SelGraph, r.SelEager = c.selG, c.selE
		// TopK's order is argmax's: its rank 0 is the argmax unless NaN.
		r.ArgmaxGraph, r.ArgmaxEager = topOf(g, c.selG), topOf(e, c.selE)
	}
	r.ArgmaxAgree = r.ArgmaxGraph == r.ArgmaxEager
	r.K = k
	r.Missing, r.Extra, r.TopKJaccard = c.selectionDiff(r.SelEager, r.SelGraph, n)
	r.FirstDiffRank = FirstDiffRank(r.SelEager, r.SelGraph)

	if !opts.NoKL && r.NonFinite == 0 && n > 0 {
		mE := math.NaN()
		if r.ArgmaxEager >= 0 && !math.IsInf(float64(e[r.ArgmaxEager]), 1) {
			mE = float64(e[r.ArgmaxEager]) // the largest finite entry
		}
		r.KL, r.KLValid = klSoftmax(g, e, mE)
	}
	if len(ref) == n && n > 0 {
		r.GraphRefRMSE, r.EagerRefRMSE, r.HasRef = refRMSE(g, e, ref)
	}
	r.AllClose = r.NotClose == 0 && r.NonFinite == 0 && r.LenGraph == r.LenEager
	r.Divergent, r.Reason = decide(&r, g, e)
	return r
}

// decide applies the policy of SPEC.md, first matching rule wins.
func decide(r *Result, g, e []float32) (bool, string) {
	switch {
	case r.LenGraph != r.LenEager:
		return true, ReasonLength
	case len(r.Missing) > 0 || len(r.Extra) > 0:
		return true, ReasonSelection
	case r.NonFinite > 0:
		return true, ReasonNonFinite
	case top1Moved(r, g, e):
		return true, ReasonTop1
	case r.AllClose:
		return false, ""
	case r.HasRef:
		bound := r.Tol.Multiplier*r.EagerRefRMSE + r.Tol.Floor
		if r.GraphRefRMSE > bound {
			return true, ReasonRefRMSE
		}
		return false, ""
	}
	return true, ReasonAllClose
}

// top1Moved reports an argmax change that is not a rounding-level tie: on at
// least one side, that side's winner beats the other side's winner by more than
// the allclose tolerance.
func top1Moved(r *Result, g, e []float32) bool {
	if r.ArgmaxAgree || r.ArgmaxGraph < 0 || r.ArgmaxEager < 0 {
		return r.ArgmaxGraph != r.ArgmaxEager && (r.ArgmaxGraph < 0 || r.ArgmaxEager < 0)
	}
	ag, ae := r.ArgmaxGraph, r.ArgmaxEager
	ev, eo := float64(e[ae]), float64(e[ag])
	gv, gow := float64(g[ag]), float64(g[ae])
	return ev-eo > r.Tol.ATol+r.Tol.RTol*math.Abs(ev) || gv-gow > r.Tol.ATol+r.Tol.RTol*math.Abs(gv)
}

// pairStats accumulates the element-wise pass.
type pairStats struct {
	sumAbs, dd, ee, gg, ge float64
	maxAbs                 float64
	maxAt                  int
	finite                 int
	nonFinite              int
	maskedG, maskedE       int
	notClose               int
	argG, argE             int
}

// pairPass computes, in one pass, everything element-wise: abs-diff sum and
// max, the squared sums behind RMSE and cosine, the allclose count and the
// non-finite mismatch count. It uses the vector kernel when the CPU has one
// and the data is finite, the scalar loop otherwise; both give the same
// counts and max, and sums equal up to float64 summation order.
func pairPass(g, e []float32, tol Tolerance) pairStats {
	if st, ok := pairPassVec(g, e, tol); ok {
		return st
	}
	return pairPassScalar(g, e, tol)
}

// pairBlockLen is the vector kernel's block: per-block sums keep float64
// summation error small, and only the block holding the max is rescanned for
// its first position.
const pairBlockLen = 8192

func pairPassVec(g, e []float32, tol Tolerance) (pairStats, bool) {
	st := pairStats{maxAt: -1, argG: -1, argE: -1}
	var out kernelOut
	n4 := len(g) &^ 3
	best, bestAt := 0.0, -1
	for lo := 0; lo < n4; lo += pairBlockLen {
		hi := min(lo+pairBlockLen, n4)
		if !pairBlock(g[lo:hi], e[lo:hi], tol.ATol, tol.RTol, &out) {
			return st, false
		}
		sa := (out.sumAbs[0] + out.sumAbs[1]) + (out.sumAbs[2] + out.sumAbs[3])
		gg := (out.gg[0] + out.gg[1]) + (out.gg[2] + out.gg[3])
		ee := (out.ee[0] + out.ee[1]) + (out.ee[2] + out.ee[3])
		if !finite(sa) || !finite(gg) || !finite(ee) {
			return st, false // a NaN or Inf in this block: the scalar path classifies it
		}
		st.sumAbs += sa
		st.gg += gg
		st.ee += ee
		st.dd += (out.dd[0] + out.dd[1]) + (out.dd[2] + out.dd[3])
		st.ge += (out.ge[0] + out.ge[1]) + (out.ge[2] + out.ge[3])
		st.notClose += int(out.notClose[0] + out.notClose[1] + out.notClose[2] + out.notClose[3])
		m := max(out.maxAbs[0], out.maxAbs[1], out.maxAbs[2], out.maxAbs[3])
		if m > best {
			best, bestAt = m, lo
		}
	}
	st.finite = n4
	if bestAt >= 0 {
		hi := min(bestAt+pairBlockLen, n4)
		for i := bestAt; i < hi; i++ {
			if math.Abs(float64(g[i])-float64(e[i])) == best {
				st.maxAt = i
				break
			}
		}
	}
	maxAbs := best
	for i := n4; i < len(g); i++ {
		st.slowEntry(g, e, i, tol.ATol, tol.RTol, &maxAbs, &st.sumAbs, &st.dd, &st.ee, &st.gg, &st.ge)
	}
	st.maxAbs = maxAbs
	return st, true
}

func finite(f float64) bool { return f-f == 0 }

func pairPassScalar(g, e []float32, tol Tolerance) pairStats {
	st := pairStats{maxAt: -1, argG: -1, argE: -1}
	atol, rtol := tol.ATol, tol.RTol
	var sa0, sa1, dd0, dd1, ee0, ee1, gg0, gg1, ge0, ge1 float64
	maxAbs := 0.0
	e = e[:len(g)]
	i := 0
	for ; i+1 < len(g); i += 2 {
		g0, e0 := float64(g[i]), float64(e[i])
		g1, e1 := float64(g[i+1]), float64(e[i+1])
		d0, d1 := g0-e0, g1-e1
		if d0-d0 != 0 || d1-d1 != 0 { // a non-finite entry: take the slow path for both
			st.slowEntry(g, e, i, atol, rtol, &maxAbs, &sa0, &dd0, &ee0, &gg0, &ge0)
			st.slowEntry(g, e, i+1, atol, rtol, &maxAbs, &sa1, &dd1, &ee1, &gg1, &ge1)
			continue
		}
		a0, a1 := math.Abs(d0), math.Abs(d1)
		sa0 += a0
		sa1 += a1
		dd0 += d0 * d0
		dd1 += d1 * d1
		ee0 += e0 * e0
		ee1 += e1 * e1
		gg0 += g0 * g0
		gg1 += g1 * g1
		ge0 += g0 * e0
		ge1 += g1 * e1
		if a0 > atol+rtol*math.Abs(e0) {
			st.notClose++
		}
		if a1 > atol+rtol*math.Abs(e1) {
			st.notClose++
		}
		if a0 > maxAbs {
			maxAbs, st.maxAt = a0, i
		}
		if a1 > maxAbs {
			maxAbs, st.maxAt = a1, i+1
		}
		st.finite += 2
	}
	for ; i < len(g); i++ {
		st.slowEntry(g, e, i, atol, rtol, &maxAbs, &sa0, &dd0, &ee0, &gg0, &ge0)
	}
	st.maxAbs = maxAbs
	st.sumAbs, st.dd, st.ee, st.gg, st.ge = sa0+sa1, dd0+dd1, ee0+ee1, gg0+gg1, ge0+ge1
	return st
}

// argmax returns the first position of the largest value (NaN never wins; a
// vector of NaN and -Inf answers its first -Inf), or -1 when all are NaN.
func argmax(v []float32) int {
	best, at := float32(math.Inf(-1)), -1
	for j, x := range v {
		if x > best {
			best, at = x, j
		}
	}
	if at < 0 {
		at = firstNonNaN(v)
	}
	return at
}

func firstNonNaN(v []float32) int {
	for i, f := range v {
		if f == f {
			return i
		}
	}
	return -1
}

// slowEntry handles one entry where either side may be non-finite.
func (st *pairStats) slowEntry(g, e []float32, i int, atol, rtol float64, maxAbs, sa, dd, ee, gg, ge *float64) {
	gv, ev := float64(g[i]), float64(e[i])
	gf := !math.IsNaN(gv) && !math.IsInf(gv, 0)
	ef := !math.IsNaN(ev) && !math.IsInf(ev, 0)
	if !gf || !ef {
		same := (math.IsNaN(gv) && math.IsNaN(ev)) || (gf == ef && gv == ev)
		if !same {
			st.nonFinite++
			switch {
			case math.IsInf(gv, -1) && ef:
				st.maskedG++
			case math.IsInf(ev, -1) && gf:
				st.maskedE++
			}
		}
		return
	}
	d := gv - ev
	a := math.Abs(d)
	*sa += a
	*dd += d * d
	*ee += ev * ev
	*gg += gv * gv
	*ge += gv * ev
	if a > atol+rtol*math.Abs(ev) {
		st.notClose++
	}
	if a > *maxAbs {
		*maxAbs, st.maxAt = a, i
	}
	st.finite++
}

// klSoftmax returns KL(P‖Q) for P = softmax(e), Q = softmax(g) over the
// positions where both are finite (positions masked to -Inf on both sides have
// probability 0 on both). With d = e-g and w = exp(e - max e):
//
//	KL = Σ w·d / Σ w + log1p(Σ w·expm1(-d) / Σ w)
//
// which is exact algebra for Σ p·(log p - log q) and keeps full float64
// precision when d is tiny (rounding noise), where the textbook form cancels.
//
// mE is the largest finite entry of e when the caller knows it, else NaN.
func klSoftmax(g, e []float32, mE float64) (float64, bool) {
	if math.IsNaN(mE) {
		mE = math.Inf(-1)
		for _, v := range e {
			if f := float64(v); f > mE && !math.IsInf(f, 1) {
				mE = f
			}
		}
	}
	if math.IsInf(mE, -1) {
		return 0, false
	}
	g = g[:len(e)]
	var z, a, b float64
	n4 := len(e) &^ 3
	for lo := 0; lo < n4; lo += pairBlockLen {
		hi := min(lo+pairBlockLen, n4)
		bz, ba, bb, ok := klBlock(g[lo:hi], e[lo:hi], mE)
		if !ok {
			bz, ba, bb = klScalar(g[lo:hi], e[lo:hi], mE)
		}
		z, a, b = z+bz, a+ba, b+bb
	}
	bz, ba, bb := klScalar(g[n4:], e[n4:], mE)
	z, a, b = z+bz, a+ba, b+bb
	if !(z > 0) {
		return 0, false
	}
	kl := a/z + math.Log1p(b/z)
	if kl < 0 { // rounding below the true value 0
		kl = 0
	}
	if !finite(kl) { // overflow: the distributions share (almost) no mass
		return 0, false
	}
	return kl, true
}

// klVecMaxD bounds |e-g| on the vector path, where expm1(-d) is a polynomial.
const klVecMaxD = 0.35

// klScalar returns Σw, Σw·d and Σw·expm1(-d) over one block.
func klScalar(g, e []float32, mE float64) (z, a, b float64) {
	var z0, z1, a0, a1, b0, b1 float64
	i := 0
	for ; i+1 < len(e); i += 2 {
		e0, e1 := float64(e[i]), float64(e[i+1])
		d0, d1 := e0-float64(g[i]), e1-float64(g[i+1])
		if d0-d0 != 0 || d1-d1 != 0 { // -Inf on both sides (weight 0) or non-finite
			if d0-d0 == 0 {
				w := expNonPos(e0 - mE)
				z0 += w
				a0 += w * d0
				b0 += w * expm1Neg(d0)
			}
			if d1-d1 == 0 {
				w := expNonPos(e1 - mE)
				z1 += w
				a1 += w * d1
				b1 += w * expm1Neg(d1)
			}
			continue
		}
		w0, w1 := expNonPos(e0-mE), expNonPos(e1-mE)
		z0 += w0
		z1 += w1
		a0 += w0 * d0
		a1 += w1 * d1
		b0 += w0 * expm1Neg(d0)
		b1 += w1 * expm1Neg(d1)
	}
	if i < len(e) {
		e0 := float64(e[i])
		if d0 := e0 - float64(g[i]); d0-d0 == 0 {
			w := expNonPos(e0 - mE)
			z0 += w
			a0 += w * d0
			b0 += w * expm1Neg(d0)
		}
	}
	return z0 + z1, a0 + a1, b0 + b1
}

// refRMSE returns rmse(g, ref) and rmse(e, ref) in float64 over the positions
// where all three are finite; ok is false when no such position exists.
func refRMSE(g, e, ref []float32) (float64, float64, bool) {
	if sg, se, ok := refRMSEVec(g, e, ref); ok {
		n := float64(len(ref))
		return math.Sqrt(sg / n), math.Sqrt(se / n), true
	}
	var sg, se float64
	n := 0
	g, e = g[:len(ref)], e[:len(ref)]
	for i, rv := range ref {
		r := float64(rv)
		dg, de := float64(g[i])-r, float64(e[i])-r
		if dg-dg != 0 || de-de != 0 {
			continue
		}
		sg += dg * dg
		se += de * de
		n++
	}
	if n == 0 {
		return 0, 0, false
	}
	return math.Sqrt(sg / float64(n)), math.Sqrt(se / float64(n)), true
}

func topOf(v []float32, sel []int32) int {
	if len(sel) == 0 || v[sel[0]] != v[sel[0]] {
		return -1
	}
	return int(sel[0])
}

// selectionDiff is SelectionDiff and Jaccard in one go on c's buffers. With
// every position in [0, n) it marks two bitmaps instead of sorting.
func (c *Comparer) selectionDiff(want, got []int32, n int) (missing, extra []int32, jaccard float64) {
	if m, x, j, ok := c.bitmapDiff(want, got, n); ok {
		return m, x, j
	}
	c.setA = sortedSetInto(c.setA, want)
	c.setB = sortedSetInto(c.setB, got)
	a, b := c.setA, c.setB
	if len(a) == 0 && len(b) == 0 {
		return nil, nil, 1
	}
	missing, extra, inter := diffSorted(a, b)
	return missing, extra, float64(inter) / float64(len(a)+len(b)-inter)
}

// refRMSEVec sums the squared errors with the vector kernel; ok is false
// without one or when any entry is non-finite (the scalar path then skips
// those positions).
func refRMSEVec(g, e, ref []float32) (sg, se float64, ok bool) {
	n4 := len(ref) &^ 3
	for lo := 0; lo < n4; lo += pairBlockLen {
		hi := min(lo+pairBlockLen, n4)
		bg, be, ok := refBlock(g[lo:hi], e[lo:hi], ref[lo:hi])
		if !ok || !finite(bg) || !finite(be) {
			return 0, 0, false
		}
		sg, se = sg+bg, se+be
	}
	for i := n4; i < len(ref); i++ {
		r := float64(ref[i])
		dg, de := float64(g[i])-r, float64(e[i])-r
		if !finite(dg) || !finite(de) {
			return 0, 0, false
		}
		sg, se = sg+dg*dg, se+de*de
	}
	return sg, se, true
}

func (c *Comparer) bitmapDiff(want, got []int32, n int) (missing, extra []int32, jaccard float64, ok bool) {
	if n <= 0 || len(want)+len(got) == 0 {
		return nil, nil, 0, false
	}
	words := (n + 63) / 64
	if cap(c.bmA) < words {
		c.bmA, c.bmB = make([]uint64, words), make([]uint64, words)
	}
	a, b := c.bmA[:words], c.bmB[:words]
	clear(a)
	clear(b)
	for _, p := range want {
		if uint(p) >= uint(n) {
			return nil, nil, 0, false
		}
		a[p>>6] |= 1 << (uint(p) & 63)
	}
	for _, p := range got {
		if uint(p) >= uint(n) {
			return nil, nil, 0, false
		}
		b[p>>6] |= 1 << (uint(p) & 63)
	}
	inter, union := 0, 0
	for w := range a {
		x, y := a[w], b[w]
		if x|y == 0 {
			continue
		}
		inter += bits.OnesCount64(x & y)
		union += bits.OnesCount64(x | y)
		for m := x &^ y; m != 0; m &= m - 1 {
			missing = append(missing, int32(w<<6+bits.TrailingZeros64(m)))
		}
		for m := y &^ x; m != 0; m &= m - 1 {
			extra = append(extra, int32(w<<6+bits.TrailingZeros64(m)))
		}
	}
	return missing, extra, float64(inter) / float64(union), true
}
