package bisect

import (
	"math"
	"math/big"
	"testing"
)

// fisherLessExact computes the one-sided p with big rationals.
func fisherLessExact(k, n, bk, bn int) float64 {
	c := k + bk
	binom := func(n, k int) *big.Int {
		if k < 0 || k > n {
			return big.NewInt(0)
		}
		return new(big.Int).Binomial(int64(n), int64(k))
	}
	tail, total := new(big.Int), new(big.Int)
	for x := 0; x <= min(n, c); x++ {
		t := new(big.Int).Mul(binom(n, x), binom(bn, c-x))
		total.Add(total, t)
		if x <= k {
			tail.Add(tail, t)
		}
	}
	f, _ := new(big.Rat).SetFrac(tail, total).Float64()
	return f
}

func TestFisherLessMatchesExact(t *testing.T) {
	for _, c := range [][4]int{{0, 80, 13, 80}, {0, 16, 6, 64}, {6, 48, 10, 128}, {17, 80, 13, 80}, {0, 1, 0, 1}, {3, 10, 3, 10}, {0, 160, 25, 160}, {40, 400, 60, 400}} {
		got, want := FisherLess(c[0], c[1], c[2], c[3]), fisherLessExact(c[0], c[1], c[2], c[3])
		if math.Abs(got-want) > 1e-9*max(want, 1e-300) && math.Abs(got-want) > 1e-12 {
			t.Errorf("FisherLess%v = %g, want %g", c, got, want)
		}
	}
	// 0/80 vs 13/80: C(80,13)/C(160,13), the seeds' fixes.
	if p := FisherLess(0, 80, 13, 80); p > 1e-4 || p < 1e-5 {
		t.Errorf("0/80 vs 13/80: p %g", p)
	}
	if p := FisherLess(5, 0, 3, 10); p != 1 {
		t.Errorf("empty arm: p %g, want 1", p)
	}
}

func TestReductionUpper(t *testing.T) {
	// Equal rates, large samples: the bound approaches 0 from above.
	big, small := ReductionUpper(160, 1000, 160, 1000, 0.025), ReductionUpper(16, 100, 16, 100, 0.025)
	if !(big > 0 && big < small && small < 0.2) {
		t.Errorf("upper bounds %g (n=1000) and %g (n=100)", big, small)
	}
	// A stricter level gives a wider bound.
	if ReductionUpper(16, 100, 16, 100, 0.001) <= small {
		t.Error("a smaller level should widen the bound")
	}
	// An arm worse than the baseline: the bound is below the observed 0.
	if u := ReductionUpper(30, 100, 10, 100, 0.025); u >= 0 {
		t.Errorf("arm 30%% vs baseline 10%%: upper bound %g, want < 0", u)
	}
}

func TestLevelsSpendAlphaOverLooks(t *testing.T) {
	d := Design{Alpha: 0.05, Beta: 0.1, MinEffect: 0.1, Budget: 160, Batch: 16, Arms: 4}
	var effSum, futSum float64
	for n := d.Batch; n <= d.Budget; n += d.Batch {
		e, f := d.Levels(d.prevLook(n), n)
		if e <= 0 || f <= 0 {
			t.Fatalf("look %d: levels %g %g", n, e, f)
		}
		effSum += e
		futSum += f
	}
	if math.Abs(effSum-d.Alpha/4) > 1e-12 || math.Abs(futSum-d.Beta/4) > 1e-12 {
		t.Errorf("spent %g and %g over the looks, want alpha/arms %g and beta/arms %g", effSum, futSum, d.Alpha/4, d.Beta/4)
	}
	// A budget that is not a multiple of the batch still spends it all.
	d.Budget = 150
	effSum = 0
	for n := d.Batch; ; n = min(n+d.Batch, d.Budget) {
		if !d.LookAt(n) {
			t.Fatalf("no look at %d", n)
		}
		e, _ := d.Levels(d.prevLook(n), n)
		effSum += e
		if n == d.Budget {
			break
		}
	}
	if math.Abs(effSum-d.Alpha/4) > 1e-12 {
		t.Errorf("budget 150: spent %g, want %g", effSum, d.Alpha/4)
	}
}
