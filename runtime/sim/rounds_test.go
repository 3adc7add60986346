package sim

import (
	"context"
	"strings"
	"testing"
)

// Issue 27 D7: rounds are capped. A script never grows past MaxRounds (before,
// NewScript(…, 1e8) ran for minutes and took gigabytes: 10,000 rounds were
// already 3.7 s and 3.7 million tokens), and Run refuses more.
func TestRoundsCapped(t *testing.T) {
	s := NewScript(1, 0, 100_000_000)
	if len(s.Rounds) > MaxRounds+1 {
		t.Fatalf("NewScript(…, 1e8): %d rounds, want at most %d", len(s.Rounds), MaxRounds+1)
	}
	w := DefaultWorkload()
	w.Judge = func(int, int, string, int, string) string { return "done" }
	w.Rounds = MaxRounds + 1
	_, err := Run(context.Background(), DefaultConfig(), w, nil)
	if err == nil || !strings.Contains(err.Error(), "at most 32") {
		t.Fatalf("Run with %d rounds: %v, want it refused", w.Rounds, err)
	}
}

// Run returns at once when its context is done while building scripts.
func TestRunCancelledWhileBuildingScripts(t *testing.T) {
	w := DefaultWorkload()
	w.Judge = func(int, int, string, int, string) string { return "done" }
	w.Sessions, w.Rounds = 10000, MaxRounds
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, DefaultConfig(), w, nil); err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("Run with a done context: %v, want context canceled", err)
	}
}
