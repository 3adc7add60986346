package canary_test

import (
	"context"
	"testing"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
)

// twinRun runs the twin with only the canary instrument and the canary
// analyzer on the event path, and returns the workload result, the canary
// summary and the canary findings.
func twinRun(t *testing.T, cfg sim.Config, w sim.Workload) (sim.Result, canary.Summary, []*hook.Finding) {
	t.Helper()
	a := canary.NewAnalyzer(canary.Options{})
	var findings []*hook.Finding
	pub := hook.WithAnalyzers(hook.PublishFunc(func(ev hook.Event) {
		if f, ok := ev.Body.(*hook.Finding); ok && f.Analyzer == canary.AnalyzerName {
			findings = append(findings, f)
		}
	}), a)
	res, err := sim.Run(context.Background(), cfg, w, pub)
	if err != nil {
		t.Fatal(err)
	}
	return res, a.Summary().(canary.Summary), findings
}

func twinConfig() sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Instruments = sim.Instruments{Canary: true, CanaryPolicy: "live"}
	return cfg
}

func TestTwinExplore(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*sim.Config)
	}{
		{"baseline", func(*sim.Config) {}},
		{"stale-outloc", func(c *sim.Config) { c.Inject = []string{sim.FaultStaleOutLoc} }},
		{"no-overlap", func(c *sim.Config) { c.MultiStreamOverlap = false }},
	} {
		cfg := twinConfig()
		c.mod(&cfg)
		w := sim.DefaultWorkload()
		w.Sessions, w.Rounds = 24, 3
		res, s, f := twinRun(t, cfg, w)
		s.Samples = nil
		t.Logf("%s: outcomes %v corrupted %d wall %.1fs\nsummary %+v\nfindings %d", c.name, res.Outcomes, res.CorruptedSessions, res.WallSeconds, s, len(f))
		for i, x := range f {
			if i < 3 {
				t.Logf("  %s %v", x.Summary, x.Evidence)
			}
		}
	}
}
