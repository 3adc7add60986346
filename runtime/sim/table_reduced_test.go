package sim

import (
	"context"
	"testing"
)

// TestTableReduced checks the seeds' table at a reduced size: 40 sessions ×
// 4 rounds on seeds 1 and 2 (one seed, 24 sessions × 2 rounds with -short;
// skipped under -race),
// with the pool of the retraction row scaled to the session count. The full
// size (80×4, seeds 1–5) is BenchmarkTable.
func TestTableReduced(t *testing.T) {
	if raceEnabled {
		t.Skip("twelve 40×4 runs take minutes under -race; run go test ./runtime/sim")
	}
	sessions, rounds, seeds := 40, 4, []uint64{1, 2}
	if testing.Short() {
		sessions, rounds, seeds = 24, 2, []uint64{1}
	}
	for _, tc := range tableConfigs() {
		t.Run(tc.name, func(t *testing.T) {
			corrupted, total, leaks, retractions := 0, 0, 0, 0
			for _, seed := range seeds {
				cfg := tc.cfg()
				cfg.Seed = seed
				cfg.Instruments = Instruments{}
				cfg.PoolTokens = cfg.PoolTokens * sessions / 80
				w := testWorkload()
				w.Sessions, w.Rounds = sessions, rounds
				res, err := Run(context.Background(), cfg, w, nil)
				if err != nil {
					t.Fatal(err)
				}
				corrupted += summary(res).CorruptedSessions
				leaks += res.Outcomes["leak"]
				total += res.Sessions
				retractions += res.Stats.Retractions
			}
			rate := float64(corrupted) / float64(total)
			switch {
			case tc.min > 0:
				// Corrupting rows: clearly above zero, mostly leaks, not absurd.
				if corrupted == 0 || rate > 0.4 || 2*leaks < corrupted {
					t.Errorf("corrupted %d/%d (leak %d): want some, mostly leak, at most 40%%", corrupted, total, leaks)
				}
			default:
				if rate > tc.max {
					t.Errorf("corrupted %d/%d = %.3f, want ≤ %.2f", corrupted, total, rate, tc.max)
				}
			}
			if tc.retract && retractions == 0 {
				t.Error("no retractions with the small pool")
			}
			t.Logf("%s: corrupted %d/%d (leak %d), retractions %d", tc.name, corrupted, total, leaks, retractions)
		})
	}
}
