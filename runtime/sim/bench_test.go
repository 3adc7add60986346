package sim

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time so far (robust to other
// load on a shared machine, unlike wall time).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchRun(b *testing.B, cfg Config, w Workload) Result {
	b.Helper()
	var res Result
	var cpu time.Duration
	for b.Loop() {
		c0 := cpuTime()
		var err error
		res, err = Run(context.Background(), cfg, w, nil)
		if err != nil {
			b.Fatal(err)
		}
		cpu = cpuTime() - c0
	}
	s := res.Stats
	b.ReportMetric(cpu.Seconds(), "cpu-s")
	b.ReportMetric(float64(s.Steps)/res.WallSeconds, "steps/s")
	b.ReportMetric(float64(s.DecodeTokens)/res.WallSeconds, "tokens/s")
	b.ReportMetric(res.WallSeconds, "wall-s")
	return res
}

// BenchmarkBaseline is the speed target: 80 sessions × 4 rounds of
// the baseline in ≤ 15 s wall. Compare instruments=off with
// instruments=on-no-graphdiff for the ≤ 10% instrument overhead, and the
// graphdiff-every-N rows for the cost of graph-vs-eager reruns.
// Run: go test -run '^$' -bench BenchmarkBaseline -benchtime 1x -count 5 ./runtime/sim
func BenchmarkBaseline(b *testing.B) {
	w := testWorkload()
	cases := []struct {
		name string
		ins  Instruments
	}{
		{"instruments=off", Instruments{}},
		{"instruments=on-no-graphdiff", func() Instruments { i := AllInstruments(); i.GraphDiff = false; return i }()},
		{"instruments=all", AllInstruments()},
	}
	for _, every := range []int{1, 4, 16} {
		i := AllInstruments()
		i.GraphDiffEvery = every
		cases = append(cases, struct {
			name string
			ins  Instruments
		}{fmt.Sprintf("graphdiff-every=%d", every), i})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Instruments = c.ins
			benchRun(b, cfg, w)
		})
	}
}

// BenchmarkTable runs the seeds' table at full size (80 sessions × 4
// rounds, seeds 1–5) and fails when a row leaves its bounds.
// Run: go test -run '^$' -bench BenchmarkTable -benchtime 1x ./runtime/sim
func BenchmarkTable(b *testing.B) {
	for _, tc := range tableConfigs() {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				lo, hi, retractions := checkTableRow(b, tc)
				b.ReportMetric(100*lo, "min-corrupt-%")
				b.ReportMetric(100*hi, "max-corrupt-%")
				b.ReportMetric(float64(retractions), "retractions")
			}
		})
	}
}

// checkTableRow runs one row of the seeds' table at full size (80 sessions ×
// 4 rounds, seeds 1–5) and fails tb when a seed leaves the row's bounds.
func checkTableRow(tb testing.TB, tc tableConfig) (lo, hi float64, retractions int) {
	lo, hi = 1.0, 0.0
	for seed := uint64(1); seed <= 5; seed++ {
		cfg := tc.cfg()
		cfg.Seed = seed
		cfg.Instruments = Instruments{}
		res, err := Run(context.Background(), cfg, testWorkload(), nil)
		if err != nil {
			tb.Fatal(err)
		}
		sum := summary(res)
		lo, hi = min(lo, sum.CorruptionRate), max(hi, sum.CorruptionRate)
		retractions += res.Stats.Retractions
		if sum.CorruptionRate < tc.min || sum.CorruptionRate > tc.max {
			tb.Errorf("%s seed %d: corruption %.3f outside [%.2f, %.2f]", tc.name, seed, sum.CorruptionRate, tc.min, tc.max)
		}
		if tc.min > 0 && sum.Outcomes.Leak*2 < sum.CorruptedSessions {
			tb.Errorf("%s seed %d: corruption is not mostly leak: %v", tc.name, seed, res.Outcomes)
		}
	}
	if tc.retract && retractions == 0 {
		tb.Errorf("%s: no retractions", tc.name)
	}
	return lo, hi, retractions
}
