package repro_test

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/runtime/sim/server/servertest"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// startTwin serves a twin with instruments off on a loopback test server.
func startTwin(t *testing.T, mut func(*sim.Config)) (*server.Server, string) {
	t.Helper()
	cfg := servertest.Config()
	if mut != nil {
		mut(&cfg)
	}
	tw := servertest.Start(t, server.Options{Config: cfg})
	return tw.Server, tw.URL
}

// TestHarnessAgainstTwinGroundTruth: the sessions the harness calls
// corrupted are exactly the sessions in which the twin served a request whose
// deviation broke the protocol, and every corrupted session deviated. The
// twin server's batching depends on request timing, so a run may happen to
// corrupt nothing; the JSON case tries up to three seeds until one does (the
// equality is checked on every run).
func TestHarnessAgainstTwinGroundTruth(t *testing.T) {
	type tcase struct {
		name             string
		stream           bool
		sessions, rounds int
		needCorruption   bool
	}
	cases := []tcase{{"json", false, 24, 3, true}, {"stream", true, 16, 3, false}}
	if raceEnabled {
		cases = []tcase{{"json", false, 10, 2, false}, {"stream", true, 6, 2, false}}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(3); seed < 6; seed++ {
				corrupted := checkGroundTruth(t, tc.stream, tc.sessions, tc.rounds, seed)
				if corrupted > 0 || !tc.needCorruption {
					return
				}
			}
			t.Errorf("no corruption in three %d×%d runs on the baseline twin: the comparison proved nothing", tc.sessions, tc.rounds)
		})
	}
}

func checkGroundTruth(t *testing.T, stream bool, sessions, rounds int, seed uint64) int {
	t.Helper()
	srv, url := startTwin(t, nil)
	res, err := repro.RunHarness(context.Background(), repro.HarnessOptions{URL: url, Sessions: sessions, Rounds: rounds, Seed: seed,
		Stream: stream, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	recs := srv.Records()
	if len(recs) != res.Requests {
		t.Fatalf("server recorded %d requests, harness sent %d", len(recs), res.Requests)
	}
	broken, deviated := map[string]bool{}, map[string]bool{}
	for _, r := range recs {
		broken[r.ID] = r.Broken
		deviated[r.ID] = r.Deviated
	}
	var corrupted, brokenSess []string
	invisible := 0
	for _, s := range res.PerSession {
		isBroken, isDev := false, false
		for _, id := range s.Requests {
			if _, ok := broken[id]; !ok {
				t.Fatalf("session %s: response id %s unknown to the server", s.ID, id)
			}
			isBroken = isBroken || broken[id]
			isDev = isDev || deviated[id]
		}
		if outcome.IsCorrupted(s.Outcome) {
			corrupted = append(corrupted, s.ID)
			if !isDev {
				t.Errorf("session %s is %s but the twin served it exactly the script", s.ID, s.Outcome)
			}
		} else if isDev {
			invisible++
		}
		if isBroken {
			brokenSess = append(brokenSess, s.ID)
		}
		if s.Outcome == "error" || s.Outcome == "timeout" {
			t.Errorf("session %s: %s (%s)", s.ID, s.Outcome, s.Reason)
		}
	}
	sort.Strings(corrupted)
	sort.Strings(brokenSess)
	if !slices.Equal(corrupted, brokenSess) {
		t.Errorf("seed %d: harness corrupted %v, twin broke %v", seed, corrupted, brokenSess)
	}
	if res.Outcomes.Done+res.Outcomes.MaxRounds == 0 {
		t.Errorf("seed %d: no session finished normally: %+v", seed, res.Outcomes)
	}
	t.Logf("seed %d: %s; deviated but invisible sessions: %d", seed, res.Headline(), invisible)
	return len(corrupted)
}
