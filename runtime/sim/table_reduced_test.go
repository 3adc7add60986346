package sim

import (
	"context"
	"testing"
)

// TestTableReduced checks the seeds' table at a reduced size for the quick
// loop (go test -short, make check): one seed, 24 sessions × 2 rounds, with
// the pool of the retraction row scaled to the session count. Without
// -short it skips: TestTableFullSize runs then and makes every check made
// here (some corruption, mostly leak, at most 40%; controls within their
// bound; retractions) with tighter bounds on five seeds at 80×4, so the
// reduced size added only minutes. Skipped under -race (the full-size
// check is arithmetic at scale; the race detector sees the same engine in
// the smaller runs of the other tests).
func TestTableReduced(t *testing.T) {
	if raceEnabled || !testing.Short() {
		t.Skip("the quick loop's table (go test -short): TestTableFullSize checks it at full size, and -race skips both")
	}
	sessions, rounds, seeds := 24, 2, []uint64{1}
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
