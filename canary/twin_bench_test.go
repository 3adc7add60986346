package canary_test

import (
	"context"
	"testing"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
)

// BenchmarkTwinCanaryCost measures the twin's decode throughput with the
// canary off, under live and under all (with the canary analyzer judging every
// replay), and reports each policy's throughput as a fraction of "off"
// (target: live ≥ 0.95; all is reported, not bounded).
func BenchmarkTwinCanaryCost(b *testing.B) {
	w := sim.DefaultWorkload()
	w.Sessions, w.Rounds = 8, 1
	var offRate float64
	for _, policy := range []string{"off", "live", "all"} {
		b.Run(policy, func(b *testing.B) {
			cfg := sim.DefaultConfig()
			cfg.Instruments = sim.Instruments{}
			var pub hook.Publisher = hook.PublishFunc(func(hook.Event) {})
			if policy != "off" {
				cfg.Instruments.Canary, cfg.Instruments.CanaryPolicy = true, policy
			}
			var tokens int64
			for b.Loop() {
				if policy != "off" {
					pub = hook.WithAnalyzers(hook.PublishFunc(func(hook.Event) {}), canary.NewAnalyzer(canary.Options{}))
				}
				res, err := sim.Run(context.Background(), cfg, w, pub)
				if err != nil {
					b.Fatal(err)
				}
				tokens += res.Stats.DecodeTokens
			}
			rate := float64(tokens) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "decode_tok/s")
			if policy == "off" {
				offRate = rate
			} else if offRate > 0 {
				b.ReportMetric(rate/offRate, "x_of_off")
			}
		})
	}
}
