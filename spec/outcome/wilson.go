package outcome

import "math"

// Z95 is the two-sided 95% standard normal quantile used for Wilson intervals.
const Z95 = 1.959963984540054

// Wilson returns the Wilson score interval for k successes in n trials at
// normal quantile z (Z95 for 95%). It is well behaved at k = 0 and k = n,
// where the normal-approximation interval collapses. With n <= 0 it returns
// the uninformative [0, 1]; k is clamped to [0, n].
func Wilson(k, n int, z float64) (lo, hi float64) {
	if n <= 0 {
		return 0, 1
	}
	k = min(max(k, 0), n)
	nf := float64(n)
	p := float64(k) / nf
	z2 := z * z
	denom := 1 + z2/nf
	center := (p + z2/(2*nf)) / denom
	half := z * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / denom
	lo, hi = center-half, center+half
	// Exact at the edges (the formula gives them up to rounding).
	if k == 0 {
		lo = 0
	}
	if k == n {
		hi = 1
	}
	return max(lo, 0), min(hi, 1)
}
