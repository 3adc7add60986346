package bisect

import (
	"fmt"
	"math"

	"github.com/kvcanary/kvcanary/spec/outcome"
)

// Design is the sequential test every arm gets against the baseline.
//
// Two claims can be made about an arm, each a one-sided test of the
// corruption rate's reduction θ = p(baseline) − p(arm):
//
//   - "removes it": H0 θ ≤ 0 is rejected by Fisher's exact test (one-sided:
//     the arm corrupts less) at the look's efficacy level;
//   - "does not remove it": H0 θ ≥ MinEffect is rejected: the upper confidence
//     bound of θ (Newcombe's hybrid score interval, 1998, method 10) at the
//     look's futility level is below MinEffect.
//
// Each arm is looked at every Batch sessions, up to Budget. The error of
// each claim is spent over the looks with the Lan–DeMets Pocock-type
// spending function α(t) = a·ln(1 + (e − 1)·t) (Lan & DeMets 1983,
// Biometrika 70:659–663; Kim & DeMets 1987), t = arm sessions / Budget, and
// look k may use α(t_k) − α(t_{k−1}). The per-look levels are used as
// separate tests (a union bound over the looks: conservative, exact for a
// discrete test whatever the correlation between looks, and valid when a
// bisect resumes or the baseline grows between looks) instead of the
// recursive-integration boundaries of a Gaussian group-sequential design,
// which a Fisher test on small counts does not follow. Across arms the
// family-wise error is split evenly (Bonferroni): a = Alpha/Arms for
// "removes it" and Beta/Arms for "does not remove it". The realized error
// rates are measured by simulation (TestStoppingRuleErrorRates).
type Design struct {
	Alpha     float64 // family-wise error of the "removes it" claims
	Beta      float64 // family-wise error of the "does not remove it" claims
	MinEffect float64 // smallest reduction of the corruption rate worth finding (absolute: 0.10 is ten points)
	Budget    int     // most sessions per arm
	Batch     int     // sessions between looks
	Arms      int     // arms judged against the baseline (the Bonferroni factor)
}

// Validate names the first bad setting.
func (d Design) Validate() error {
	switch {
	case !(d.Alpha > 0 && d.Alpha < 1):
		return fmt.Errorf("alpha %v: want a level between 0 and 1 (e.g. 0.05)", d.Alpha)
	case !(d.Beta > 0 && d.Beta < 1):
		return fmt.Errorf("beta %v: want a level between 0 and 1 (e.g. 0.10)", d.Beta)
	case !(d.MinEffect > 0 && d.MinEffect <= 1):
		return fmt.Errorf("min_effect %v: want the smallest reduction of the corruption rate worth finding, above 0 and at most 1 (e.g. 0.10)", d.MinEffect)
	case d.Batch < 1:
		return fmt.Errorf("batch %d: want at least 1 session between looks", d.Batch)
	case d.Budget < d.Batch:
		return fmt.Errorf("budget %d: want at least one batch (%d) of sessions per arm", d.Budget, d.Batch)
	case d.Arms < 1:
		return fmt.Errorf("no arms to judge")
	}
	return nil
}

// spend is the Pocock-type spending function of level a at information
// fraction t (clamped to [0, 1]).
func spend(a, t float64) float64 {
	t = min(max(t, 0), 1)
	return a * math.Log(1+(math.E-1)*t)
}

// Levels returns the efficacy and futility levels a look at n arm
// sessions may use, given the previous look at prev sessions.
func (d Design) Levels(prev, n int) (efficacy, futility float64) {
	t0, t1 := float64(prev)/float64(d.Budget), float64(n)/float64(d.Budget)
	a, b := d.Alpha/float64(d.Arms), d.Beta/float64(d.Arms)
	return spend(a, t1) - spend(a, t0), spend(b, t1) - spend(b, t0)
}

// LookAt reports whether an arm with n sessions is at a look: every Batch
// sessions, and at the Budget.
func (d Design) LookAt(n int) bool { return n > 0 && (n%d.Batch == 0 || n == d.Budget) }

// prevLook is the look before the one at n (0 for the first).
func (d Design) prevLook(n int) int {
	if n%d.Batch == 0 {
		return n - d.Batch
	}
	return n - n%d.Batch
}

// Decision is what a bisect concludes about an arm.
type Decision string

// Decisions.
const (
	Undecided  Decision = ""                   // still running
	Removes    Decision = "removes it"         // fewer corrupted sessions than the baseline, significant
	Nothing    Decision = "does not remove it" // no reduction of MinEffect or more (the words kvcanary demo uses too)
	CannotTell Decision = "could not tell within budget"
	Failed     Decision = "failed" // the server did not start or died; see the arm's error
)

// Look is one interim analysis of an arm against the baseline.
type Look struct {
	ArmN, ArmK   int      `json:"-"`
	BaseN, BaseK int      `json:"-"`
	Sessions     int      `json:"arm_sessions"`
	Corrupted    int      `json:"arm_corrupted"`
	BaseSessions int      `json:"baseline_sessions"`
	BaseCorrupt  int      `json:"baseline_corrupted"`
	P            float64  `json:"p"`               // one-sided Fisher: the arm corrupts less
	PLevel       float64  `json:"p_level"`         // efficacy level spent at this look
	Reduction    float64  `json:"reduction"`       // observed p(baseline) − p(arm)
	Upper        float64  `json:"reduction_upper"` // upper confidence bound of the reduction at the futility level
	UpperLevel   float64  `json:"upper_level"`     // futility level spent at this look
	Decision     Decision `json:"decision"`
}

// Judge makes the look at n arm sessions with k corrupted, against a
// baseline of bn sessions with bk corrupted.
func (d Design) Judge(n, k, bn, bk int) Look {
	eff, fut := d.Levels(d.prevLook(n), n)
	l := Look{Sessions: n, Corrupted: k, BaseSessions: bn, BaseCorrupt: bk, PLevel: eff, UpperLevel: fut}
	l.P = FisherLess(k, n, bk, bn)
	var pa, pb float64
	if n > 0 {
		pa = float64(k) / float64(n)
	}
	if bn > 0 {
		pb = float64(bk) / float64(bn)
	}
	l.Reduction = pb - pa
	l.Upper = ReductionUpper(k, n, bk, bn, fut)
	switch {
	case l.P <= eff:
		l.Decision = Removes
	case l.Upper < d.MinEffect:
		l.Decision = Nothing
	case n >= d.Budget:
		l.Decision = CannotTell
	}
	return l
}

// FisherLess is the one-sided p-value of Fisher's exact test that the arm
// (k corrupted of n) corrupts less than the baseline (bk of bn): the
// probability, with the table's margins fixed, of k or fewer corrupted
// sessions in the arm.
func FisherLess(k, n, bk, bn int) float64 {
	if n <= 0 || bn <= 0 {
		return 1
	}
	c := k + bk // corrupted in all
	lo, hi := max(0, c-bn), min(n, c)
	// Normalize by the largest term so exp never underflows where it matters.
	m := math.Inf(-1)
	for x := lo; x <= hi; x++ {
		m = max(m, ldhyper(x, n, bn, c))
	}
	var tail, total float64
	for x := lo; x <= hi; x++ {
		e := math.Exp(ldhyper(x, n, bn, c) - m)
		total += e
		if x <= k {
			tail += e
		}
	}
	return min(1, tail/total)
}

// ldhyper is log C(n, x)·C(bn, c−x), the unnormalized log probability of x
// corrupted arm sessions.
func ldhyper(x, n, bn, c int) float64 { return lchoose(n, x) + lchoose(bn, c-x) }

func lchoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n) + 1)
	b, _ := math.Lgamma(float64(k) + 1)
	c, _ := math.Lgamma(float64(n-k) + 1)
	return a - b - c
}

// ReductionUpper is the upper bound of the one-sided (1 − level)
// confidence interval of p(baseline) − p(arm), Newcombe's hybrid score
// interval built from the two Wilson intervals.
func ReductionUpper(k, n, bk, bn int, level float64) float64 {
	if n <= 0 || bn <= 0 {
		return 1
	}
	z := zUpper(level)
	pa, pb := float64(k)/float64(n), float64(bk)/float64(bn)
	loA, _ := outcome.Wilson(k, n, z)
	_, hiB := outcome.Wilson(bk, bn, z)
	return min(1, pb-pa+math.Sqrt((hiB-pb)*(hiB-pb)+(pa-loA)*(pa-loA)))
}

// zUpper is the standard normal quantile with upper tail level.
func zUpper(level float64) float64 {
	level = min(max(level, 1e-300), 0.5)
	return math.Sqrt2 * math.Erfinv(1-2*level)
}
