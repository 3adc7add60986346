package graphdiff

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The vector kernel (when the CPU has one) and the scalar loop agree: counts
// and the max exactly, sums to float64 summation-order rounding.
func TestPairPassVectorMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, n := range []int{0, 1, 3, 4, 5, 8191, 8192, 8193, 20001, 129280} {
		g, e := make([]float32, n), make([]float32, n)
		for i := range e {
			e[i] = float32(rng.NormFloat64() * 5)
			g[i] = e[i] + float32(rng.NormFloat64()*1e-3)
		}
		if n > 100 {
			g[n/2] = e[n/2] + 7 // a clear maximum
			g[n/3] = e[n/3] + 7 // an equal one earlier: the first wins
		}
		tol := ToleranceFor("fp32", n)
		vec, ok := pairPassVec(g, e, tol)
		if !ok {
			if haveVectorKernel() {
				t.Fatalf("n=%d: vector path declined finite data", n)
			}
			t.Skip("no vector kernel on this CPU/build")
		}
		sc := pairPassScalar(g, e, tol)
		if vec.notClose != sc.notClose || vec.finite != sc.finite || vec.nonFinite != sc.nonFinite ||
			vec.maxAbs != sc.maxAbs || vec.maxAt != sc.maxAt {
			t.Fatalf("n=%d: vector %+v\nscalar %+v", n, vec, sc)
		}
		for _, p := range [][2]float64{{vec.sumAbs, sc.sumAbs}, {vec.dd, sc.dd}, {vec.ee, sc.ee}, {vec.gg, sc.gg}, {vec.ge, sc.ge}} {
			if math.Abs(p[0]-p[1]) > 1e-12*math.Abs(p[1]) {
				t.Fatalf("n=%d: sums differ: %v vs %v", n, p[0], p[1])
			}
		}
	}
	// A NaN sends the whole pair to the scalar path.
	g := make([]float32, 64)
	e := make([]float32, 64)
	g[10] = float32(math.NaN())
	if _, ok := pairPassVec(g, e, ToleranceFor("", 64)); ok {
		t.Fatal("vector path accepted a NaN")
	}
	if st := pairPass(g, e, ToleranceFor("", 64)); st.nonFinite != 1 {
		t.Fatalf("pairPass with a NaN: %+v", st)
	}
}
