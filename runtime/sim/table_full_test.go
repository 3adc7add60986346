package sim

import "testing"

// TestTableFullSize holds the seeds' table where it is specified: 80 sessions ×
// 4 rounds, seeds 1–5, every row within its bounds (the same check as
// BenchmarkTable). At reduced sizes the race hits a larger share of sessions
// (TestTableReduced only bounds it loosely), so this is the test that makes
// `make test` enforce 10–25% for the bug rows and ≤ 3% for the controls.
// Thirty twin runs: about two minutes on two cores; skipped with -short and
// under -race.
func TestTableFullSize(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("thirty 80×4 twin runs: run go test ./runtime/sim without -short or -race")
	}
	for _, tc := range tableConfigs() {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi, retractions := checkTableRow(t, tc)
			t.Logf("%s: corruption %.1f%%–%.1f%% over seeds 1–5, retractions %d", tc.name, 100*lo, 100*hi, retractions)
		})
	}
}
