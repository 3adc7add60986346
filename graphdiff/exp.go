package graphdiff

import "math"

// expTable[j] = 2^(j/64), to within an ulp.
var expTable = func() (t [64]uint64) {
	for j := range t {
		t[j] = math.Float64bits(math.Exp2(float64(j) / 64))
	}
	return t
}()

const (
	expShift  = 0x1.8p52 // adding it rounds a float64 below 2^51 to an integer in the low mantissa bits
	expInvL   = 64 / math.Ln2
	expCutoff = -708.0
)

// ln2/64 split fdlibm-style: expL1 has 21 trailing zero bits, so kd·expL1 is
// exact for every |kd| < 2^21 (|x| <= 708 needs |kd| < 2^16).
var (
	expL1 = math.Float64frombits(0x3fe62e42fee00000) / 64
	expL2 = math.Float64frombits(0x3dea39ef35793c76) / 64
)

// expNonPos returns e^x for x <= 0 to within a few ulps, and 0 below -708
// (where the result would be subnormal; softmax weights that small are far
// below float64 resolution of a sum that includes the maximum's weight 1).
//
// x = (64k + j)·ln2/64 + r with |r| <= ln2/128, so e^x = 2^k · 2^(j/64) · e^r
// and e^r needs only a degree-5 polynomial (truncation error < 4e-17).
func expNonPos(x float64) float64 {
	if !(x >= expCutoff) { // also NaN
		return 0
	}
	return expReduced(x)
}

// expReduced is e^x for -708 <= x <= 709 (the scale 2^k stays a normal
// number at both ends).
func expReduced(x float64) float64 {
	kd := x*expInvL + expShift
	ki := int64(math.Float64bits(kd)&(1<<52-1)) - 1<<51
	kd -= expShift
	r := x - kd*expL1 - kd*expL2
	r2 := r * r
	p := 1 + r + r2*(0.5+r*(1.0/6)) + r2*r2*(1.0/24+r*(1.0/120))
	scale := math.Float64frombits(uint64(int64(expTable[ki&63]) + (ki>>6)<<52))
	return scale * p
}

// expm1Neg returns e^(-d) - 1, exactly enough for the KL sum: a Taylor series
// for the tiny differences rounding produces, e^(-d) - 1 for the rest.
func expm1Neg(d float64) float64 {
	if d > -2e-3 && d < 2e-3 {
		return -d + d*d*(0.5-d*(1.0/6-d*(1.0/24-d*(1.0/120))))
	}
	if d > -709 && d < 708 {
		// |e^(-d) - 1| >= 2e-3 here, so subtracting 1 costs at most
		// ~500 ulps of e^(-d)'s few-ulp error: < 1e-13 relative.
		return expReduced(-d) - 1
	}
	return math.Expm1(-d)
}
