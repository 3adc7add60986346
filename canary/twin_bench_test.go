package canary_test

import (
	"context"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// BenchmarkTwinCanaryCost measures what the canary costs the twin's decode
// throughput. Each iteration runs the same deterministic workload twice,
// canary off and canary on (with the analyzer judging every replay), so both
// see the same machine noise; x_of_off is the on/off throughput ratio
// (target: live ≥ 0.95; all is reported, not bounded).
func BenchmarkTwinCanaryCost(b *testing.B) {
	w := sim.DefaultWorkload()
	w.Judge = outcome.Classifier{}.Outcome
	w.Sessions, w.Rounds = 8, 1
	for _, policy := range []string{"live", "all"} {
		b.Run(policy, func(b *testing.B) {
			off := sim.DefaultConfig()
			off.Instruments = sim.Instruments{}
			on := off
			on.Instruments.Canary, on.Instruments.CanaryPolicy = true, policy
			var offDur, onDur time.Duration
			var tokens int64
			for b.Loop() {
				t0 := time.Now()
				resOff, err := sim.Run(context.Background(), off, w, nil)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				pub := hook.WithAnalyzers(hook.PublishFunc(func(hook.Event) {}), canary.NewAnalyzer(canary.Options{}))
				resOn, err := sim.Run(context.Background(), on, w, pub)
				if err != nil {
					b.Fatal(err)
				}
				onDur += time.Since(t1)
				offDur += t1.Sub(t0)
				if resOn.Stats.DecodeTokens != resOff.Stats.DecodeTokens {
					b.Fatalf("canary changed the run: %d vs %d decode tokens", resOn.Stats.DecodeTokens, resOff.Stats.DecodeTokens)
				}
				tokens += resOn.Stats.DecodeTokens
			}
			b.ReportMetric(float64(tokens)/onDur.Seconds(), "decode_tok/s")
			b.ReportMetric(offDur.Seconds()/onDur.Seconds(), "x_of_off")
		})
	}
}
