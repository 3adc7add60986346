package graphdiff

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestSelectionDiff(t *testing.T) {
	tests := []struct {
		want, got      []int32
		missing, extra []int32
		jaccard        float64
		rank           int
	}{
		{nil, nil, nil, nil, 1, -1},
		{[]int32{1, 2, 3}, []int32{1, 2, 3}, nil, nil, 1, -1},
		{[]int32{1, 2, 3}, []int32{1, 3, 2}, nil, nil, 1, 1},
		{[]int32{5, 9, 7}, []int32{5, 4, 7}, []int32{9}, []int32{4}, 0.5, 1},
		{[]int32{3, 1}, []int32{}, []int32{1, 3}, nil, 0, 0},
		{[]int32{2, 2, 1}, []int32{1, 2}, nil, nil, 1, 0}, // duplicates are one position
		{[]int32{1, 2}, []int32{1, 2, 8}, nil, []int32{8}, 2.0 / 3, 2},
	}
	for _, tt := range tests {
		m, x := SelectionDiff(tt.want, tt.got)
		if !slices.Equal(m, tt.missing) || !slices.Equal(x, tt.extra) {
			t.Errorf("SelectionDiff(%v, %v) = %v, %v; want %v, %v", tt.want, tt.got, m, x, tt.missing, tt.extra)
		}
		if j := Jaccard(tt.want, tt.got); !near(j, tt.jaccard, 1e-12) {
			t.Errorf("Jaccard(%v, %v) = %v, want %v", tt.want, tt.got, j, tt.jaccard)
		}
		if r := FirstDiffRank(tt.want, tt.got); r != tt.rank {
			t.Errorf("FirstDiffRank(%v, %v) = %d, want %d", tt.want, tt.got, r, tt.rank)
		}
	}
}

func TestCompareMetrics(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	tests := []struct {
		name       string
		g, e       []float32
		maxAbs     float64
		maxAt      int
		mean       float64
		cosine     float64
		nonFinite  int
		divergent  bool
		reason     string
		argmaxSame bool
	}{
		{name: "identical", g: []float32{1, 2, 3}, e: []float32{1, 2, 3}, cosine: 1, maxAt: -1, argmaxSame: true},
		{name: "orthogonal", g: []float32{1, 0}, e: []float32{0, 1}, maxAbs: 1, maxAt: 0, mean: 1, cosine: 0,
			divergent: true, reason: ReasonSelection},
		{name: "opposite", g: []float32{-1, -2}, e: []float32{1, 2}, maxAbs: 4, maxAt: 1, mean: 3, cosine: -1,
			divergent: true, reason: ReasonSelection},
		// cos([1,2,3],[1,2,4]) = 17/sqrt(14*21)
		{name: "known cosine", g: []float32{1, 2, 4}, e: []float32{1, 2, 3}, maxAbs: 1, maxAt: 2, mean: 1.0 / 3,
			cosine: 17 / math.Sqrt(14*21), divergent: true, reason: ReasonAllClose, argmaxSame: true},
		{name: "NaN both sides is equal", g: []float32{nan, 1}, e: []float32{nan, 1}, cosine: 1, maxAt: -1, argmaxSame: true},
		{name: "NaN one side diverges", g: []float32{nan, 1}, e: []float32{0.5, 1}, cosine: 1, maxAt: -1, nonFinite: 1,
			divergent: true, reason: ReasonNonFinite, argmaxSame: true},
		{name: "NaN against Inf", g: []float32{nan, 1}, e: []float32{inf, 1}, cosine: 1, maxAt: -1, nonFinite: 1,
			divergent: true, reason: ReasonSelection}, // top-1 moved from the Inf: selection is checked first
		{name: "NaN against -Inf outside top-k", g: []float32{1, nan}, e: []float32{1, -inf}, cosine: 1, maxAt: -1, nonFinite: 1,
			divergent: true, reason: ReasonNonFinite, argmaxSame: true},
		{name: "same Inf is equal", g: []float32{inf, 1}, e: []float32{inf, 1}, cosine: 1, maxAt: -1, argmaxSame: true},
		{name: "+Inf against -Inf", g: []float32{inf, 1}, e: []float32{-inf, 1}, cosine: 1, maxAt: -1, nonFinite: 1,
			divergent: true, reason: ReasonSelection},
		{name: "-Inf against +Inf outside top-k", g: []float32{2, -inf, 1}, e: []float32{2, inf, 1}, cosine: 1, maxAt: -1, nonFinite: 1,
			divergent: true, reason: ReasonSelection}, // +Inf would be the top-1 of eager
		{name: "masked on one side outside top-k", g: []float32{2, -inf, 1}, e: []float32{2, 0, 1}, maxAt: -1, nonFinite: 1,
			cosine: 1, divergent: true, reason: ReasonNonFinite, argmaxSame: true},
		{name: "length mismatch", g: []float32{1, 2}, e: []float32{1, 2, 3}, cosine: 1, maxAt: -1,
			divergent: true, reason: ReasonLength, argmaxSame: true},
		{name: "all zero", g: []float32{0, 0}, e: []float32{0, 0}, cosine: 1, maxAt: -1, argmaxSame: true},
		{name: "one side zero", g: []float32{0, 0}, e: []float32{1, 0}, maxAbs: 1, maxAt: 0, mean: 0.5, cosine: 0,
			divergent: true, reason: ReasonAllClose, argmaxSame: true},
		{name: "empty", cosine: 1, maxAt: -1, argmaxSame: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Compare(tt.g, tt.e, nil, Options{K: 1})
			if !near(r.MaxAbsDiff, tt.maxAbs, 1e-12) || r.MaxAbsDiffAt != tt.maxAt {
				t.Errorf("max abs diff = %v at %d, want %v at %d", r.MaxAbsDiff, r.MaxAbsDiffAt, tt.maxAbs, tt.maxAt)
			}
			if !near(r.MeanAbsDiff, tt.mean, 1e-12) {
				t.Errorf("mean abs diff = %v, want %v", r.MeanAbsDiff, tt.mean)
			}
			if !near(r.Cosine, tt.cosine, 1e-12) {
				t.Errorf("cosine = %v, want %v", r.Cosine, tt.cosine)
			}
			if r.NonFinite != tt.nonFinite {
				t.Errorf("non-finite = %d, want %d", r.NonFinite, tt.nonFinite)
			}
			if r.Divergent != tt.divergent || r.Reason != tt.reason {
				t.Errorf("divergent = %v (%q), want %v (%q)", r.Divergent, r.Reason, tt.divergent, tt.reason)
			}
			if r.ArgmaxAgree != tt.argmaxSame {
				t.Errorf("argmax agree = %v (%d vs %d), want %v", r.ArgmaxAgree, r.ArgmaxGraph, r.ArgmaxEager, tt.argmaxSame)
			}
			if _, err := json.Marshal(r); err != nil {
				t.Errorf("result does not encode: %v", err)
			}
		})
	}
}

func TestRelRMSE(t *testing.T) {
	// e = [3,4] (rms² sum 25), g = [3,5]: sqrt(1/25) = 0.2.
	r := Compare([]float32{3, 5}, []float32{3, 4}, nil, Options{})
	if !near(r.RelRMSE, 0.2, 1e-12) {
		t.Fatalf("rel RMSE = %v, want 0.2", r.RelRMSE)
	}
}

// klRef is the textbook KL(softmax(e) || softmax(g)) in float64 with
// math.Exp, for vectors where it is numerically safe.
func klRef(g, e []float32) float64 {
	lse := func(v []float32) float64 {
		m := math.Inf(-1)
		for _, x := range v {
			m = math.Max(m, float64(x))
		}
		s := 0.0
		for _, x := range v {
			s += math.Exp(float64(x) - m)
		}
		return m + math.Log(s)
	}
	le, lg := lse(e), lse(g)
	kl := 0.0
	for i := range e {
		lp := float64(e[i]) - le
		kl += math.Exp(lp) * (lp - (float64(g[i]) - lg))
	}
	return kl
}

func TestKL(t *testing.T) {
	// Known value: P = softmax([0, ln 3]) = (1/4, 3/4), Q = uniform:
	// KL = 1/4 ln(1/2) + 3/4 ln(3/2).
	e := []float32{0, float32(math.Log(3))}
	g := []float32{0, 0}
	r := Compare(g, e, nil, Options{})
	want := 0.25*math.Log(0.5) + 0.75*math.Log(1.5)
	if !r.KLValid || !near(r.KL, want, 1e-7) {
		t.Fatalf("KL = %v (valid %v), want %v", r.KL, r.KLValid, want)
	}
	// Shift invariance: adding a constant to a side does not change softmax.
	r = Compare([]float32{5, 5, 5}, []float32{1, 1, 1}, nil, Options{})
	if !r.KLValid || r.KL > 1e-15 {
		t.Fatalf("KL of shifted identical distributions = %v, want 0", r.KL)
	}
	// Large logits do not overflow (stable log-sum-exp).
	r = Compare([]float32{1000, 999}, []float32{999, 1000}, nil, Options{})
	want = klRef([]float32{1, 0}, []float32{0, 1})
	if !r.KLValid || !near(r.KL, want, 1e-9) {
		t.Fatalf("KL at 1000 = %v, want %v", r.KL, want)
	}
	// Random vectors against the textbook form.
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 20; trial++ {
		n := 1 + rng.IntN(5000)
		g, e := make([]float32, n), make([]float32, n)
		for i := range e {
			e[i] = float32(rng.NormFloat64() * 4)
			g[i] = e[i] + float32(rng.NormFloat64()*0.5)
		}
		r := Compare(g, e, nil, Options{})
		if want := klRef(g, e); !r.KLValid || !near(r.KL, want, 1e-9*math.Max(1, want)) {
			t.Fatalf("n=%d: KL = %v, want %v", n, r.KL, want)
		}
	}
	// Tiny rounding noise: the stable form stays >= 0 and ~ Var(d)/2.
	n := 4096
	g, e = make([]float32, n), make([]float32, n)
	for i := range e {
		e[i] = float32(rng.NormFloat64())
		g[i] = math.Nextafter32(e[i], 10)
	}
	r = Compare(g, e, nil, Options{})
	if !r.KLValid || r.KL < 0 || r.KL > 1e-12 {
		t.Fatalf("KL of 1-ulp noise = %v, want tiny and non-negative", r.KL)
	}
	// Undefined with a NaN on one side.
	r = Compare([]float32{float32(math.NaN()), 1}, []float32{0, 1}, nil, Options{})
	if r.KLValid {
		t.Fatal("KL claimed valid with a one-sided NaN")
	}
	r = Compare([]float32{1, 2}, []float32{1, 2}, nil, Options{NoKL: true})
	if r.KLValid {
		t.Fatal("KL computed with NoKL")
	}
}

func TestExpNonPos(t *testing.T) {
	for _, x := range []float64{0, -1e-300, -1e-9, -0.3, -0.5, -1, -2.5, -10, -37.7, -100, -700, -707.9} {
		got, want := expNonPos(x), math.Exp(x)
		if math.Abs(got-want) > 4e-16*want {
			t.Errorf("expNonPos(%v) = %v, want %v", x, got, want)
		}
	}
	if expNonPos(-709) != 0 || expNonPos(math.Inf(-1)) != 0 || expNonPos(math.NaN()) != 0 {
		t.Error("expNonPos below the cutoff, -Inf or NaN is not 0")
	}
	for _, d := range []float64{0, 1e-9, -1e-9, 1e-3, -1.9e-3, 2e-3, -2.1e-3, 0.01, 0.5, -3, 50, -300, 707, -708.5, 800, -800} {
		if got, want := expm1Neg(d), math.Expm1(-d); math.Abs(got-want) > 1e-13*math.Max(math.Abs(want), 1e-300) {
			t.Errorf("expm1Neg(%v) = %v, want %v", d, got, want)
		}
	}
}

func TestPolicyReference(t *testing.T) {
	n := 2000
	rng := rand.New(rand.NewPCG(5, 6))
	ref := make([]float32, n)
	e := make([]float32, n)
	g := make([]float32, n)
	// Values 0.1 apart, so noise of 1e-2 never reorders the top.
	for i := range ref {
		ref[i] = float32(i)*0.1 - 100
		e[i] = ref[i] + float32(rng.NormFloat64()*1e-3) // eager: 1e-3 rounding error
		g[i] = ref[i] + float32(rng.NormFloat64()*1e-3)
	}
	opts := Options{Dtype: "fp32", K: 16}
	// Not allclose at fp32 tolerance, but no worse than eager vs the reference.
	r := Compare(g, e, ref, opts)
	if r.AllClose {
		t.Fatal("test setup: expected the pair not to be allclose")
	}
	if r.Divergent {
		t.Fatalf("graph as good as eager vs the reference judged divergent: %s (graph %v eager %v)",
			r.Reason, r.GraphRefRMSE, r.EagerRefRMSE)
	}
	// Without the reference, the same pair diverges (allclose fails).
	if r := Compare(g, e, nil, opts); !r.Divergent || r.Reason != ReasonAllClose {
		t.Fatalf("no reference: divergent=%v reason=%q, want allclose", r.Divergent, r.Reason)
	}
	// Graph error ten times the eager error fails on the reference rule.
	for i := range g {
		g[i] = ref[i] + float32(rng.NormFloat64()*1e-2)
	}
	r = Compare(g, e, ref, opts)
	if !r.Divergent || r.Reason != ReasonRefRMSE {
		t.Fatalf("graph error %v vs eager %v: divergent=%v reason=%q, want ref_rmse",
			r.GraphRefRMSE, r.EagerRefRMSE, r.Divergent, r.Reason)
	}
}

func TestToleranceFor(t *testing.T) {
	if tol := ToleranceFor("bfloat16", 5000); tol.Dtype != "bf16" || tol.Multiplier != 3 || tol.RTol != 1e-2 {
		t.Errorf("bf16: %+v", tol)
	}
	if tol := ToleranceFor("float32", 5000); tol.Multiplier != 2 || tol.Floor != 1e-5 {
		t.Errorf("fp32: %+v", tol)
	}
	if tol := ToleranceFor("fp32", 999); tol.Multiplier != SmallMultiplier {
		t.Errorf("small fp32 multiplier: %+v", tol)
	}
	if tol := ToleranceFor("weird", 5000); tol.Dtype != "fp32" {
		t.Errorf("unknown dtype: %+v", tol)
	}
	if _, ok := CanonicalDtype("weird"); ok {
		t.Error("unknown dtype reported as known")
	}
}

func TestCompareSampleUsesSelections(t *testing.T) {
	// Identical logits but the graph used a different selection: divergent.
	s := &hook.GraphDiffSample{
		Step: 3, Request: "r1", Dtype: "bf16",
		Graph: []float32{1, 2, 3, 4}, Eager: []float32{1, 2, 3, 4},
		TopKGraph: []int32{2, 1}, TopKEager: []int32{3, 2}, K: 2, SeqLen: 4,
	}
	r := CompareSample(s, Options{})
	if !r.Divergent || r.Reason != ReasonSelection {
		t.Fatalf("divergent=%v reason=%q, want selection", r.Divergent, r.Reason)
	}
	if !slices.Equal(r.Missing, []int32{3}) || !slices.Equal(r.Extra, []int32{1}) || r.FirstDiffRank != 0 {
		t.Fatalf("missing %v extra %v rank %d", r.Missing, r.Extra, r.FirstDiffRank)
	}
	if r.Tol.Dtype != "bf16" || r.K != 2 {
		t.Fatalf("dtype %q k %d", r.Tol.Dtype, r.K)
	}
	// The graph masked a position outside the selection: non-finite, and
	// counted as masked by the graph.
	s = &hook.GraphDiffSample{Step: 5, Request: "r3", Graph: []float32{4, 3, float32(math.Inf(-1))},
		Eager: []float32{4, 3, 1}, K: 1}
	r = CompareSample(s, Options{})
	if !r.Divergent || r.Reason != ReasonNonFinite || r.MaskedGraph != 1 || r.MaskedEager != 0 {
		t.Fatalf("masked: divergent=%v reason=%q masked=%d/%d", r.Divergent, r.Reason, r.MaskedGraph, r.MaskedEager)
	}
	if h := Headline(Report(s, &r)); !strings.Contains(h, "the graph masked 1 position (-Inf)") {
		t.Fatalf("headline %q", h)
	}
	// Top-k only (no vectors): the selections alone decide.
	s = &hook.GraphDiffSample{Step: 4, Request: "r2", TopKGraph: []int32{7, 8}, TopKEager: []int32{7, 8}}
	if r := CompareSample(s, Options{}); r.Divergent || r.TopKJaccard != 1 {
		t.Fatalf("identical top-k-only sample: divergent=%v jaccard=%v", r.Divergent, r.TopKJaccard)
	}
}
