package graphdiff

import (
	"math"
	"math/rand/v2"
	"testing"
)

// propVector returns a random logit vector of random length and shape; some
// have NaN/-Inf entries (masked positions) and bf16-quantized values.
func propVector(rng *rand.Rand) []float32 {
	n := 1 + rng.IntN(6000)
	v := make([]float32, n)
	scale := math.Pow(10, rng.Float64()*4-1)
	quant := rng.IntN(3) == 0
	for i := range v {
		x := float32(rng.NormFloat64() * scale)
		if quant {
			x = math.Float32frombits(math.Float32bits(x) &^ 0xffff)
		}
		v[i] = x
	}
	if rng.IntN(4) == 0 {
		for j := 0; j < 1+n/20; j++ {
			if rng.IntN(2) == 0 {
				v[rng.IntN(n)] = float32(math.NaN())
			} else {
				v[rng.IntN(n)] = float32(math.Inf(-1))
			}
		}
	}
	return v
}

var propDtypes = []string{"fp32", "bf16", "fp16", "fp8", ""}

// Identical vectors never diverge, whatever their content, dtype or k.
func TestPropertyIdenticalNeverDiverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 300; trial++ {
		v := propVector(rng)
		w := append([]float32(nil), v...)
		opts := Options{K: 1 + rng.IntN(len(v)+10), Dtype: propDtypes[rng.IntN(len(propDtypes))]}
		var ref []float32
		if rng.IntN(2) == 0 {
			ref = w
		}
		r := Compare(v, w, ref, opts)
		if r.Divergent || r.MaxAbsDiff != 0 || r.TopKJaccard != 1 || r.FirstDiffRank != -1 || !r.ArgmaxAgree {
			t.Fatalf("trial %d (n=%d %+v): identical vectors: divergent=%v reason=%q maxabs=%v jaccard=%v rank=%d",
				trial, len(v), opts, r.Divergent, r.Reason, r.MaxAbsDiff, r.TopKJaccard, r.FirstDiffRank)
		}
	}
}

// Swapping the top-1 value with any entry that is not tied with it within the
// tolerance always diverges, for every k and dtype, with or without a
// reference equal to eager.
func TestPropertyFlippedTop1Diverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for trial := 0; trial < 400; trial++ {
		e := propVector(rng)
		if len(e) < 2 {
			continue
		}
		opts := Options{K: 1 + rng.IntN(len(e)), Dtype: propDtypes[rng.IntN(len(propDtypes))]}
		tol := ToleranceFor(opts.Dtype, len(e))
		top := TopK(e, 1, nil)[0]
		// A partner clearly below the top-1 (beyond the allclose tolerance).
		j := -1
		for tries := 0; tries < 50; tries++ {
			c := rng.IntN(len(e))
			a, b := float64(e[top]), float64(e[c])
			if c != int(top) && b == b && !math.IsInf(b, 0) && a-b > tol.ATol+tol.RTol*math.Abs(a) {
				j = c
				break
			}
		}
		if j < 0 {
			continue
		}
		g := append([]float32(nil), e...)
		g[top], g[j] = g[j], g[top]
		var ref []float32
		if rng.IntN(2) == 0 {
			ref = e
		}
		r := Compare(g, e, ref, opts)
		if !r.Divergent {
			t.Fatalf("trial %d (n=%d %+v): swapping top-1 %d (%v) with %d (%v) did not diverge: %+v",
				trial, len(e), opts, top, e[top], j, e[j], r)
		}
	}
}

// Rounding noise well inside the dtype's tolerance passes (no selection
// change is possible because the values are spaced wider than the noise).
func TestPropertyRoundingNoisePasses(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for trial := 0; trial < 200; trial++ {
		dtype := propDtypes[rng.IntN(len(propDtypes))]
		n := 2 + rng.IntN(2000)
		tol := ToleranceFor(dtype, n)
		e := make([]float32, n)
		// A permutation of ±r^j, |r^j| >= 1, r = 1+4·rtol: neighbours are
		// 4·rtol·|v| apart, while the noise below is at most 0.5·rtol·|v|.
		perm := rng.Perm(n)
		for i := range e {
			m := math.Pow(1+4*tol.RTol, float64(perm[i]/2))
			if perm[i]%2 == 1 {
				m = -m
			}
			e[i] = float32(m)
		}
		g := make([]float32, n)
		for i := range g {
			lim := 0.25 * (tol.ATol + tol.RTol*math.Abs(float64(e[i])))
			g[i] = e[i] + float32((rng.Float64()*2-1)*lim)
		}
		r := Compare(g, e, nil, Options{K: 1 + rng.IntN(n), Dtype: dtype})
		if r.Divergent {
			t.Fatalf("trial %d (%s n=%d): rounding noise judged divergent: %s (max abs %v)", trial, dtype, n, r.Reason, r.MaxAbsDiff)
		}
		if r.MaxAbsDiff == 0 {
			t.Fatalf("trial %d: test setup produced no noise", trial)
		}
	}
}

// A graph whose error against the reference is far above eager's fails, even
// when each entry is tiny; the same error on the eager side passes.
func TestPropertyGraphErrorFarAboveEagerFails(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for trial := 0; trial < 100; trial++ {
		dtype := propDtypes[rng.IntN(len(propDtypes))]
		n := 1000 + rng.IntN(4000)
		tol := ToleranceFor(dtype, n)
		// The top 64 entries stand far above a bulk in [-1, 1], so noise
		// reorders only inside the bulk and the top-k selection is stable.
		ref := make([]float32, n)
		for i := range ref {
			ref[i] = float32(rng.Float64()*2 - 1)
		}
		for i, p := range rng.Perm(n)[:64] {
			ref[p] = float32(10 + i)
		}
		eagerErr := tol.Floor
		graphErr := 20 * (tol.Multiplier*eagerErr + tol.Floor)
		e, g := make([]float32, n), make([]float32, n)
		for i := range ref {
			e[i] = ref[i] + float32(rng.NormFloat64()*eagerErr)
			g[i] = ref[i] + float32(rng.NormFloat64()*graphErr)
		}
		opts := Options{K: 1 + rng.IntN(64), Dtype: dtype}
		r := Compare(g, e, ref, opts)
		if !r.Divergent {
			t.Fatalf("trial %d (%s): graph ref RMSE %v vs eager %v passed", trial, dtype, r.GraphRefRMSE, r.EagerRefRMSE)
		}
		// Swap roles: graph accurate, eager noisy — within the bound.
		r = Compare(e, g, ref, opts)
		if r.Divergent {
			t.Fatalf("trial %d (%s): accurate graph vs noisy eager diverged: %s", trial, dtype, r.Reason)
		}
	}
}
