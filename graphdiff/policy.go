package graphdiff

import "strings"

// Tolerance is the rounding a graph-vs-eager pair may show before the pair is
// judged divergent; SPEC.md gives the numbers and the reasons.
//
// Two entries g (graph) and e (eager) are close when |g-e| <= ATol + RTol·|e|
// (numpy/torch allclose with the eager side as the reference). When some entry
// is not close and a float64-accumulated reference r is available, the pair
// still passes when rmse(g, r) <= Multiplier·rmse(e, r) + Floor: the graph is no
// worse than a multiple of the eager path's own rounding error.
type Tolerance struct {
	Dtype      string  `json:"dtype"` // canonical dtype the numbers were chosen for
	RTol       float64 `json:"rtol"`
	ATol       float64 `json:"atol"`
	Multiplier float64 `json:"multiplier"`
	Floor      float64 `json:"floor"`
}

// SmallN is the vector length below which the reference multiplier is raised
// to at least SmallMultiplier: on short vectors a few entries of rounding noise
// dominate the RMSE (TorchDynamo's same() does the same below 1000 elements).
const (
	SmallN          = 1000
	SmallMultiplier = 3.0
)

// CanonicalDtype maps the spellings engines use to "fp32", "bf16", "fp16" or
// "fp8"; ok is false for an empty or unknown name (then "fp32" is returned, the
// strictest policy).
func CanonicalDtype(s string) (dtype string, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fp32", "f32", "float32", "float":
		return "fp32", true
	case "bf16", "bfloat16":
		return "bf16", true
	case "fp16", "f16", "float16", "half":
		return "fp16", true
	case "fp8", "fp8_e4m3", "fp8e4m3", "e4m3", "float8_e4m3fn", "fp8_e5m2", "e5m2":
		return "fp8", true
	}
	return "fp32", false
}

// ToleranceFor returns the tolerance for logits produced in dtype over n
// entries. Unknown dtypes get the fp32 (strictest) numbers.
func ToleranceFor(dtype string, n int) Tolerance {
	d, _ := CanonicalDtype(dtype)
	var t Tolerance
	switch d {
	case "bf16", "fp8":
		t = Tolerance{Dtype: d, RTol: 1e-2, ATol: 1e-2, Multiplier: 3, Floor: 1e-3}
	case "fp16":
		t = Tolerance{Dtype: d, RTol: 1e-3, ATol: 1e-3, Multiplier: 3, Floor: 1e-4}
	default:
		t = Tolerance{Dtype: "fp32", RTol: 1e-4, ATol: 1e-4, Multiplier: 2, Floor: 1e-5}
	}
	if n < SmallN && t.Multiplier < SmallMultiplier {
		t.Multiplier = SmallMultiplier
	}
	return t
}

// Reasons a pair is judged divergent, in the order the policy checks them.
const (
	ReasonLength    = "length"    // the two vectors differ in length
	ReasonSelection = "selection" // the top-k selections differ as sets
	ReasonNonFinite = "nonfinite" // NaN/Inf on one side only (or of different kinds)
	ReasonTop1      = "top1"      // the argmax moved by more than rounding
	ReasonAllClose  = "allclose"  // not allclose and no reference to arbitrate
	ReasonRefRMSE   = "ref_rmse"  // graph error vs the reference exceeds the eager bound
)
