package graphdiff

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refTopK is the specification of TopK: a full stable sort.
func refTopK(v []float32, k int) []int32 {
	idx := make([]int32, len(v))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int {
		ka, kb := sortKey(v[a]), sortKey(v[b])
		switch {
		case ka > kb:
			return -1
		case ka < kb:
			return 1
		}
		return 0
	})
	k = max(0, min(k, len(v)))
	return idx[:k]
}

func TestTopKTable(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	negz := float32(math.Copysign(0, -1))
	tests := []struct {
		name string
		v    []float32
		k    int
		want []int32
	}{
		{"empty", nil, 3, []int32{}},
		{"k zero", []float32{1, 2}, 0, []int32{}},
		{"k negative", []float32{1, 2}, -1, []int32{}},
		{"k above n", []float32{1, 3, 2}, 10, []int32{1, 2, 0}},
		{"ties lower index first", []float32{5, 7, 7, 5, 7}, 4, []int32{1, 2, 4, 0}},
		{"NaN last", []float32{nan, 1, nan, -inf}, 4, []int32{1, 3, 0, 2}},
		{"NaN never beats -Inf", []float32{nan, -inf}, 1, []int32{1}},
		{"inf first", []float32{1, inf, 2}, 2, []int32{1, 2}},
		{"-0 ties +0", []float32{negz, 0, negz}, 3, []int32{0, 1, 2}},
		{"negatives", []float32{-3, -1, -2}, 2, []int32{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TopK(tt.v, tt.k, nil)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("TopK(%v, %d) = %v, want %v", tt.v, tt.k, got, tt.want)
			}
		})
	}
}

// TestTopKMatchesSort checks both code paths (sampled threshold, radix select
// fallback) against a full sort on large vectors with ties, NaNs, adversarial
// (sorted, strided) layouts and quantized values.
func TestTopKMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	n := 20000
	gens := map[string]func(i int) float32{
		"gauss":      func(int) float32 { return float32(rng.NormFloat64()) },
		"ascending":  func(i int) float32 { return float32(i) },
		"descending": func(i int) float32 { return float32(-i) },
		"few values": func(int) float32 { return float32(rng.IntN(5)) },
		"all equal":  func(int) float32 { return 1 },
		"mostly NaN": func(int) float32 {
			if rng.IntN(10) > 0 {
				return float32(math.NaN())
			}
			return float32(rng.NormFloat64())
		},
		// Large values exactly on the sample stride fool the sampled threshold.
		"strided": func(i int) float32 {
			if i%(n/topkSample) == 0 {
				return 100 + float32(rng.NormFloat64())
			}
			return float32(rng.NormFloat64())
		},
		"bf16 quantized": func(int) float32 {
			return math.Float32frombits(math.Float32bits(float32(rng.NormFloat64())) &^ 0xffff)
		},
		"masked tail": func(i int) float32 {
			if i > n/2 {
				return float32(math.Inf(-1))
			}
			return float32(rng.NormFloat64())
		},
	}
	var s topkScratch
	for name, gen := range gens {
		v := make([]float32, n)
		for i := range v {
			v[i] = gen(i)
		}
		for _, k := range []int{1, 64, 2048, n / 2, n} {
			got := s.topK(v, k, nil)
			want := refTopK(v, k)
			if !slices.Equal(got, want) {
				t.Fatalf("%s k=%d: TopK differs from a full sort (first diff at rank %d)", name, k, FirstDiffRank(got, want))
			}
			// The fallback must agree too.
			got = s.radixSelect(v, k, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("%s k=%d: radixSelect differs from a full sort (first diff at rank %d)", name, k, FirstDiffRank(got, want))
			}
		}
	}
}

func TestTopKReusesDst(t *testing.T) {
	dst := make([]int32, 0, 8)
	got := TopK([]float32{3, 1, 2}, 2, dst)
	if &got[:1][0] != &dst[:1][0] {
		t.Fatal("TopK did not append into the given buffer")
	}
	if !slices.Equal(got, []int32{0, 2}) {
		t.Fatalf("got %v", got)
	}
}
