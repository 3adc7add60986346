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

// The vector KL kernel agrees with the scalar sums to 1e-9 relative, on noise
// of every size it accepts, with masked (-Inf on both sides) positions.
func TestKLVectorMatchesScalar(t *testing.T) {
	if !haveVectorKernel() {
		t.Skip("no vector kernel on this CPU/build")
	}
	rng := rand.New(rand.NewPCG(23, 24))
	for _, noise := range []float64{1e-7, 1e-3, 0.1, 0.3} {
		for _, n := range []int{4, 64, 8192, 20000} {
			g, e := make([]float32, n), make([]float32, n)
			for i := range e {
				e[i] = float32(rng.NormFloat64() * 4)
				d := math.Max(-0.34, math.Min(0.34, rng.NormFloat64()*noise))
				g[i] = e[i] + float32(d)
			}
			e[n-1], g[n-1] = float32(math.Inf(-1)), float32(math.Inf(-1))
			mE := math.Inf(-1)
			for _, v := range e {
				mE = math.Max(mE, float64(v))
			}
			z, a, b, ok := klBlock(g, e, mE)
			if !ok {
				t.Fatalf("noise %v n=%d: vector kernel declined", noise, n)
			}
			sz, sa, sb := klScalar(g, e, mE)
			// Σw is a sum of positives: tight. Σw·d and Σw·expm1(-d) cancel
			// (random signs), so their weights' 3e-10 error shows relative
			// to Σ|w·d|, not to the sum; the KL below is what matters.
			if math.Abs(z-sz) > 1e-9*sz {
				t.Fatalf("noise %v n=%d: Σw vector %v scalar %v", noise, n, z, sz)
			}
			klv := a/z + math.Log1p(b/z)
			kls := sa/sz + math.Log1p(sb/sz)
			if math.Abs(klv-kls) > 1e-6*kls+1e-18 {
				t.Fatalf("noise %v n=%d: KL vector %v scalar %v", noise, n, klv, kls)
			}
		}
	}
	// A large difference declines (the scalar path takes the block).
	if _, _, _, ok := klBlock([]float32{0, 0, 0, 5}, []float32{0, 0, 0, 0}, 0); ok {
		t.Fatal("vector kernel accepted |d| = 5")
	}
}

func TestFilterGE(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, n := range []int{0, 7, 8, 9, 1000, 50001} {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
			switch rng.IntN(50) {
			case 0:
				v[i] = float32(math.NaN())
			case 1:
				v[i] = float32(math.Copysign(0, -1))
			}
		}
		for _, th := range []float32{-10, -0.5, 0, 1.5, 10} {
			var want []int32
			for i, f := range v {
				if f >= th {
					want = append(want, int32(i))
				}
			}
			got := filterGE(v, th, nil)
			if len(got) != len(want) {
				t.Fatalf("n=%d t=%v: %d indices, want %d", n, th, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("n=%d t=%v: index %d is %d, want %d", n, th, i, got[i], want[i])
				}
			}
		}
	}
}

func TestRefRMSEVectorMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	n := 20003
	g, e, r := make([]float32, n), make([]float32, n), make([]float32, n)
	var sg, se float64
	for i := range r {
		r[i] = float32(rng.NormFloat64())
		g[i] = r[i] + float32(rng.NormFloat64()*1e-2)
		e[i] = r[i] + float32(rng.NormFloat64()*1e-3)
		dg, de := float64(g[i])-float64(r[i]), float64(e[i])-float64(r[i])
		sg, se = sg+dg*dg, se+de*de
	}
	gr, er, ok := refRMSE(g, e, r)
	if !ok || math.Abs(gr-math.Sqrt(sg/float64(n))) > 1e-12*gr || math.Abs(er-math.Sqrt(se/float64(n))) > 1e-12*er {
		t.Fatalf("refRMSE = %v, %v (%v)", gr, er, ok)
	}
	// A NaN in the reference: that position is skipped.
	r[5] = float32(math.NaN())
	gr2, _, ok := refRMSE(g, e, r)
	if !ok || gr2 == gr || math.IsNaN(gr2) {
		t.Fatalf("refRMSE with a NaN = %v (%v)", gr2, ok)
	}
}

// The bitmap selection diff agrees with the sorting one (duplicates included),
// and out-of-range positions fall back to sorting.
func TestBitmapDiffMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	var c Comparer
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(3000)
		a := make([]int32, rng.IntN(200))
		b := make([]int32, rng.IntN(200))
		for i := range a {
			a[i] = int32(rng.IntN(n))
		}
		for i := range b {
			b[i] = int32(rng.IntN(n))
		}
		m, x, j := c.selectionDiff(a, b, n)
		wm, wx := SelectionDiff(a, b)
		if wj := Jaccard(a, b); j != wj || !slicesEqual(m, wm) || !slicesEqual(x, wx) {
			t.Fatalf("trial %d: bitmap (%v %v %v) vs sort (%v %v %v)", trial, m, x, j, wm, wx, wj)
		}
	}
	m, x, j := c.selectionDiff([]int32{-1, 5}, []int32{5, 100}, 10)
	if !slicesEqual(m, []int32{-1}) || !slicesEqual(x, []int32{100}) || j != 1.0/3 {
		t.Fatalf("out of range: %v %v %v", m, x, j)
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
