package graphdiff

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// benchPair returns a vocabulary-sized logit pair: eager ~ N(0, 3²), graph the
// same values recomputed with fp32 rounding noise (a different accumulation
// order), and a reference.
func benchPair(n int) (g, e, ref []float32) {
	rng := rand.New(rand.NewPCG(1, 2))
	g, e, ref = make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range e {
		x := rng.NormFloat64() * 3
		ref[i] = float32(x)
		e[i] = float32(x * (1 + 1e-7*rng.NormFloat64()))
		g[i] = float32(x * (1 + 1e-7*rng.NormFloat64()))
	}
	return g, e, ref
}

func benchCompare(b *testing.B, k int) {
	g, e, ref := benchPair(129280)
	var c Comparer
	opts := Options{K: k, Dtype: "fp32"}
	per := make([]float64, 0, 1024)
	for b.Loop() {
		t0 := time.Now()
		r := c.Compare(g, e, ref, nil, nil, opts)
		per = append(per, float64(time.Since(t0).Nanoseconds())/1e6)
		if r.Divergent {
			b.Fatalf("rounding-noise pair judged divergent: %+v", r.Reason)
		}
	}
	slices.Sort(per)
	b.ReportMetric(per[len(per)/2], "ms/op")
}

// BenchmarkCompare129280 is the target: all metrics for one
// 129,280-entry pair (DeepSeek-V3's vocabulary size) including top-k with
// k=2048 must take <= 0.5 ms on one core. ms/op is the median call.
func BenchmarkCompare129280(b *testing.B) { benchCompare(b, 2048) }

// BenchmarkCompare129280K64 is the same with k=64.
func BenchmarkCompare129280K64(b *testing.B) { benchCompare(b, 64) }

func BenchmarkTopK129280(b *testing.B) {
	_, e, _ := benchPair(129280)
	var s topkScratch
	var dst []int32
	for b.Loop() {
		dst = s.topK(e, 2048, dst)
	}
}

func BenchmarkPairPass129280(b *testing.B) {
	g, e, _ := benchPair(129280)
	tol := ToleranceFor("fp32", len(g))
	for b.Loop() {
		pairPass(g, e, tol)
	}
}

func BenchmarkKL129280(b *testing.B) {
	g, e, _ := benchPair(129280)
	for b.Loop() {
		klSoftmax(g, e, math.NaN())
	}
}
