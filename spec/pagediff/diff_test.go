package pagediff

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func naiveDiff(a, b []uint64) []uint32 {
	var out []uint32
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			out = append(out, uint32(i))
		}
	}
	return out
}

// TestDiffMatchesNaive compares Diff with a scalar reference on random arrays
// of every size 0..4 blocks+, with changes at every block alignment and at
// several densities, and with a non-empty dst prefix that must be kept.
func TestDiffMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 4*diffBlock+3; n++ {
		for _, density := range []float64{0, 0.01, 0.2, 1} {
			a := make([]uint64, n)
			for i := range a {
				a[i] = rng.Uint64()
			}
			b := slices.Clone(a)
			for i := range b {
				if rng.Float64() < density {
					b[i] ^= 1 << rng.IntN(64)
				}
			}
			want := naiveDiff(a, b)
			prefix := []uint32{7, 7}
			got := Diff(a, b, slices.Clone(prefix))
			if !slices.Equal(got[:2], prefix) {
				t.Fatalf("n=%d: dst prefix clobbered: %v", n, got[:2])
			}
			if !slices.Equal(got[2:], want) {
				t.Fatalf("n=%d density=%v: Diff=%v want %v", n, density, got[2:], want)
			}
		}
	}
}

// TestDiffEveryPosition flips exactly one element at every index of arrays
// whose length is not a multiple of the block, and one at a time at each
// offset inside a block, so every alignment of a change is covered.
func TestDiffEveryPosition(t *testing.T) {
	for _, n := range []int{1, diffBlock - 1, diffBlock, diffBlock + 1, 3*diffBlock + 5} {
		a := make([]uint64, n)
		for i := range a {
			a[i] = uint64(i) * 0x9e3779b97f4a7c15
		}
		for pos := range n {
			b := slices.Clone(a)
			b[pos]++
			got := Diff(a, b, nil)
			if len(got) != 1 || got[0] != uint32(pos) {
				t.Fatalf("n=%d pos=%d: got %v", n, pos, got)
			}
		}
	}
}

func TestDiffUnequalLengths(t *testing.T) {
	a := []uint64{1, 2, 3, 4}
	b := []uint64{1, 9}
	if got := Diff(a, b, nil); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("Diff over the common prefix: got %v want [1]", got)
	}
	if got := Diff(nil, b, nil); len(got) != 0 {
		t.Fatalf("Diff(nil, b) = %v, want empty", got)
	}
}
