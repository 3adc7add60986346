package sessions

import (
	"github.com/kvcanary/kvcanary/spec/outcome"
	"math"
	"math/big"
	"testing"
)

func TestFisherExactKnownValues(t *testing.T) {
	// Reference values are exact hypergeometric sums (fractions computed by
	// hand / with exact rationals), matching R's fisher.test two-sided p.
	cases := []struct {
		a, b, c, d int
		want       float64
	}{
		{3, 1, 1, 3, 17.0 / 35},                // Fisher's tea-tasting table: 0.4857
		{0, 10, 10, 0, 1.0 / 92378},            // 2/C(20,10)
		{14, 66, 1, 79, 0.0005682572315204173}, // the seeds: 14/80 leak (bf16) vs 1/80 (fp8)
		{14, 66, 0, 80, 6.553361437755207e-05},
		{10, 50, 15, 45, 0.3688636103427911},
		{6, 34, 0, 40, 111.0 / 4345},
		{10, 50, 0, 60, 1749.0 / 1346282},
		{3, 77, 1, 79, 5161.0 / 8321},
		{1, 2, 3, 4, 1},
		{14, 66, 14, 66, 1},
		{0, 0, 5, 5, 1},
		{0, 0, 0, 0, 1},
	}
	for _, c := range cases {
		got := FisherExact(c.a, c.b, c.c, c.d)
		if math.Abs(got-c.want) > 1e-9*c.want {
			t.Errorf("FisherExact(%d,%d,%d,%d) = %.12g, want %.12g", c.a, c.b, c.c, c.d, got, c.want)
		}
		// Symmetric under swapping rows and swapping columns.
		if s := FisherExact(c.c, c.d, c.a, c.b); math.Abs(s-got) > 1e-12 {
			t.Errorf("row swap changed p: %g vs %g", s, got)
		}
		if s := FisherExact(c.b, c.a, c.d, c.c); math.Abs(s-got) > 1e-12 {
			t.Errorf("column swap changed p: %g vs %g", s, got)
		}
	}
	if p := FisherExact(-1, 2, 3, 4); !math.IsNaN(p) {
		t.Errorf("negative cell: p = %v, want NaN", p)
	}
}

// exactFisher is an independent implementation with exact rationals.
func exactFisher(a, b, c, d int) float64 {
	r1, r2, c1 := a+b, c+d, a+c
	n := r1 + r2
	lo, hi := max(0, c1-r2), min(r1, c1)
	denom := new(big.Int).Binomial(int64(n), int64(c1))
	prob := func(x int) *big.Rat {
		num := new(big.Int).Mul(new(big.Int).Binomial(int64(r1), int64(x)), new(big.Int).Binomial(int64(r2), int64(c1-x)))
		return new(big.Rat).SetFrac(num, denom)
	}
	obs := prob(a)
	sum := new(big.Rat)
	for x := lo; x <= hi; x++ {
		if p := prob(x); p.Cmp(obs) <= 0 {
			sum.Add(sum, p)
		}
	}
	f, _ := sum.Float64()
	return f
}

func TestFisherExactAgainstRationals(t *testing.T) {
	for a := 0; a <= 12; a += 3 {
		for b := 0; b <= 40; b += 13 {
			for c := 0; c <= 12; c += 4 {
				for d := 0; d <= 40; d += 11 {
					got, want := FisherExact(a, b, c, d), exactFisher(a, b, c, d)
					if math.Abs(got-want) > 1e-9*want {
						t.Errorf("FisherExact(%d,%d,%d,%d) = %.15g, exact %.15g", a, b, c, d, got, want)
					}
				}
			}
		}
	}
	// Large tables stay finite (log space).
	if p := FisherExact(900, 9100, 1000, 9000); !(p > 0 && p < 0.05) {
		t.Errorf("large table p = %v", p)
	}
}

func TestWilson(t *testing.T) {
	cases := []struct {
		k, n   int
		lo, hi float64
	}{
		{14, 80, 0.10720636440977926, 0.2725754197883133},
		{0, 80, 0, 0.0458181295355271},
		{80, 80, 0.9541818704644728, 1},
		{1, 80, 0.0022099755204522745, 0.06746270077668665},
		{10, 60, 0.0931317697919145, 0.2803161316361453},
	}
	for _, c := range cases {
		lo, hi := outcome.Wilson(c.k, c.n, outcome.Z95)
		if math.Abs(lo-c.lo) > 1e-12 || math.Abs(hi-c.hi) > 1e-12 {
			t.Errorf("Wilson(%d,%d) = [%v, %v], want [%v, %v]", c.k, c.n, lo, hi, c.lo, c.hi)
		}
		if p := float64(c.k) / float64(c.n); p < lo || p > hi {
			t.Errorf("Wilson(%d,%d) = [%v, %v] excludes the point estimate", c.k, c.n, lo, hi)
		}
	}
	if lo, hi := outcome.Wilson(0, 0, outcome.Z95); lo != 0 || hi != 1 {
		t.Errorf("Wilson(0,0) = [%v, %v]", lo, hi)
	}
	if lo, hi := outcome.Wilson(90, 80, outcome.Z95); lo < 0.9 || hi != 1 {
		t.Errorf("k > n not clamped: [%v, %v]", lo, hi)
	}
	// Narrower with more data.
	_, h1 := outcome.Wilson(10, 100, outcome.Z95)
	_, h2 := outcome.Wilson(100, 1000, outcome.Z95)
	if h2 >= h1 {
		t.Errorf("interval did not narrow: %v >= %v", h2, h1)
	}
}
