package bisect

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/sessions"
)

// bernoulli is an engine whose sessions are corrupted independently with a
// per-arm probability: the stopping rule's error rates by simulation.
type bernoulli struct {
	rates map[string]float64
	rng   *rand.Rand
}

func (b *bernoulli) Run(ctx context.Context, seg Segment, _ *sessions.RunStats, observe func(int, string, string) bool) error {
	p := b.rates[seg.Arm]
	for i := range seg.Sessions {
		outcome := hook.OutcomeDone
		if b.rng.Float64() < p {
			outcome = hook.OutcomeLeak
		}
		if observe(i, fmt.Sprintf("s%03d", i), outcome) {
			return nil
		}
	}
	return nil
}

// seedsPlan is the seeds' four arms with the plan defaults.
func seedsPlan(t testing.TB) *Plan {
	t.Helper()
	p, err := ParsePlan([]byte(`
[[arm]]
name = "fp8"
flags = ["--index-k-dtype", "fp8"]
[[arm]]
name = "no-graph"
flags = ["--disable-cuda-graph"]
[[arm]]
name = "max-bs-64"
flags = ["--cuda-graph-max-bs", "64"]
[[arm]]
name = "overlap-off"
flags = ["--multi-stream-overlap=false"]
`), "seeds")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type simTally struct {
	runs      int
	decisions map[string]map[Decision]int
	sessions  map[string]int
}

func simulate(t testing.TB, p *Plan, rates map[string]float64, runs int, seed uint64) simTally {
	t.Helper()
	tl := simTally{runs: runs, decisions: map[string]map[Decision]int{}, sessions: map[string]int{}}
	eng := &bernoulli{rates: rates, rng: rand.New(rand.NewPCG(seed, 1))}
	for range runs {
		r := &Runner{Plan: p, Engine: eng}
		st, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range st.Arms {
			if tl.decisions[a.Name] == nil {
				tl.decisions[a.Name] = map[Decision]int{}
			}
			tl.decisions[a.Name][a.Decision]++
			tl.sessions[a.Name] += len(a.Sessions)
		}
	}
	return tl
}

// TestStoppingRuleErrorRates: 10,000 simulated bisects of the seeds' plan
// under the null (every arm corrupts as the baseline does) and under the
// seeds' effect sizes (baseline 13/80; fp8, no graphs and overlap off 0/80;
// max-bs 64 17/80). The family-wise rate of false "removes it" claims must
// stay within alpha, false "does not remove it" claims within beta.
func TestStoppingRuleErrorRates(t *testing.T) {
	runs := 10000
	if testing.Short() || raceEnabled {
		runs = 1000
	}
	p := seedsPlan(t)
	d := p.Design()
	arms := []string{"fp8", "no-graph", "max-bs-64", "overlap-off"}

	null := map[string]float64{"baseline": 13.0 / 80}
	for _, a := range arms {
		null[a] = 13.0 / 80
	}
	tl := simulate(t, p, null, runs, 1)
	falseRemoves := 0
	// Family-wise: a bisect with any false claim counts once; the arms'
	// claims are counted per arm here, an upper bound of the family rate.
	for _, a := range arms {
		falseRemoves += tl.decisions[a][Removes]
	}
	fwer := float64(falseRemoves) / float64(runs)
	t.Logf("null (all arms at 16%%): false 'removes it' %.4f (alpha %.2f); decisions %v", fwer, d.Alpha, tl.decisions)
	if fwer > d.Alpha {
		t.Errorf("false 'removes it' rate %.4f over alpha %.2f", fwer, d.Alpha)
	}

	seeds := map[string]float64{"baseline": 13.0 / 80, "fp8": 0, "no-graph": 0, "max-bs-64": 17.0 / 80, "overlap-off": 0}
	tl = simulate(t, p, seeds, runs, 2)
	total := 0
	for _, a := range arms {
		total += tl.sessions[a]
	}
	mean := float64(total) / float64(runs*len(arms))
	t.Logf("seeds' effects: decisions %v; mean sessions per arm %.1f (baseline %.1f)", tl.decisions, mean, float64(tl.sessions["baseline"])/float64(runs))
	// The demo spends 80 sessions on every arm and the baseline.
	if mean >= 80 {
		t.Errorf("mean sessions per arm %.1f: the sequential rule should decide with fewer than the demo's 80", mean)
	}
	for _, a := range []string{"fp8", "no-graph", "overlap-off"} {
		power := float64(tl.decisions[a][Removes]) / float64(runs)
		falseNothing := float64(tl.decisions[a][Nothing]) / float64(runs)
		t.Logf("%s: power %.4f, false 'does not remove it' %.4f", a, power, falseNothing)
		if power < 0.9 {
			t.Errorf("%s: power %.4f to find a fix that removes the corruption, want ≥ 0.9", a, power)
		}
		if falseNothing > d.Beta {
			t.Errorf("%s: false 'does not remove it' %.4f over beta %.2f", a, falseNothing, d.Beta)
		}
	}
	// At the smallest effect worth finding (16% → 6%), "does not remove it"
	// is the wrong claim: its rate must stay within beta.
	edge := map[string]float64{"baseline": 0.16}
	for _, a := range arms {
		edge[a] = 0.16 - d.MinEffect
	}
	et := simulate(t, p, edge, runs/5, 3)
	wrong := 0
	for _, a := range arms {
		wrong += et.decisions[a][Nothing]
	}
	t.Logf("at the min effect (16%% → 6%%): decisions %v; false 'does not remove it' %.4f (beta %.2f)", et.decisions, float64(wrong)/float64(et.runs), d.Beta)
	if float64(wrong)/float64(et.runs) > d.Beta {
		t.Errorf("false 'does not remove it' at the min effect: %.4f over beta %.2f", float64(wrong)/float64(et.runs), d.Beta)
	}

	nothing := float64(tl.decisions["max-bs-64"][Nothing]) / float64(runs)
	t.Logf("max-bs-64: 'does not remove it' %.4f, 'removes it' %.4f", nothing, float64(tl.decisions["max-bs-64"][Removes])/float64(runs))
	if tl.decisions["max-bs-64"][Removes] > 0 && float64(tl.decisions["max-bs-64"][Removes])/float64(runs) > d.Alpha {
		t.Errorf("max-bs-64 (worse than the baseline) called a fix in %d of %d bisects", tl.decisions["max-bs-64"][Removes], runs)
	}
}
