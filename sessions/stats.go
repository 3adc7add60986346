package sessions

import (
	"math"
	"sort"
)

// fisherRelErr is R's tolerance in fisher.test: tables whose probability is
// within a factor 1+1e-7 of the observed one count as "as extreme", so ties
// lost to rounding are not dropped.
const fisherRelErr = 1 + 1e-7

// FisherExact returns the two-sided p-value of Fisher's exact test for the
// 2×2 table
//
//	a b
//	c d
//
// (rows: the two arms; columns: corrupted, not corrupted). With the margins
// fixed, the count in cell a is hypergeometric; the p-value is the total
// probability of every table no more probable than the observed one (R's
// fisher.test definition, with its relative tolerance 1+1e-7). Probabilities
// are computed in log space with math.Lgamma, so large counts do not
// overflow. A table with a negative cell returns NaN; an empty table returns 1.
func FisherExact(a, b, c, d int) float64 {
	if a < 0 || b < 0 || c < 0 || d < 0 {
		return math.NaN()
	}
	r1, r2 := a+b, c+d
	c1 := a + c
	n := r1 + r2
	if n == 0 {
		return 1
	}
	lo := max(0, c1-r2)
	hi := min(r1, c1)
	if lo == hi {
		return 1
	}
	logd := func(x int) float64 { return lchoose(r1, x) + lchoose(r2, c1-x) }
	// Normalize by the largest term so exp never underflows for the terms
	// that matter (R's dnhyper does the same).
	terms := make([]float64, hi-lo+1)
	m := math.Inf(-1)
	for x := lo; x <= hi; x++ {
		terms[x-lo] = logd(x)
		m = max(m, terms[x-lo])
	}
	var total float64
	for i, t := range terms {
		terms[i] = math.Exp(t - m)
		total += terms[i]
	}
	obs := terms[a-lo] * fisherRelErr
	// Sum the small terms first for accuracy.
	small := make([]float64, 0, len(terms))
	for _, t := range terms {
		if t <= obs {
			small = append(small, t)
		}
	}
	sort.Float64s(small)
	var p float64
	for _, t := range small {
		p += t
	}
	return min(p/total, 1)
}

// lchoose is log(n choose k) via log-gamma.
func lchoose(n, k int) float64 {
	return lfact(n) - lfact(k) - lfact(n-k)
}

func lfact(n int) float64 {
	v, _ := math.Lgamma(float64(n) + 1)
	return v
}
