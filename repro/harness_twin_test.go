package repro_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
)

// startTwin serves a twin with instruments off on a loopback test server.
func startTwin(t *testing.T, mut func(*sim.Config)) (*server.Server, string) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Instruments = sim.Instruments{}
	if mut != nil {
		mut(&cfg)
	}
	srv, err := server.New(server.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Run(ctx)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		cancel()
		srv.Close()
	})
	return srv, hs.URL
}

// TestHarnessAgainstTwinGroundTruth: the sessions the harness calls
// corrupted are exactly the sessions in which the twin served a request whose
// deviation broke the protocol, and every corrupted session deviated.
func TestHarnessAgainstTwinGroundTruth(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			srv, url := startTwin(t, nil)
			res, err := repro.RunHarness(context.Background(), repro.HarnessOptions{URL: url, Sessions: 24, Rounds: 3, Seed: 3,
				Stream: stream, Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			recs := srv.Records()
			if len(recs) != res.Requests {
				t.Fatalf("server recorded %d requests, harness sent %d", len(recs), res.Requests)
			}
			broken, deviated := map[string]bool{}, map[string]bool{}
			for _, r := range recs {
				if r.Broken {
					broken[r.ID] = true
				}
				if r.Deviated {
					deviated[r.ID] = true
				}
			}
			var corrupted, brokenSess []string
			invisible := 0
			for _, s := range res.PerSession {
				isBroken, isDev := false, false
				for _, id := range s.Requests {
					isBroken = isBroken || broken[id]
					isDev = isDev || deviated[id]
				}
				if repro.IsCorrupted(s.Outcome) {
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
				t.Errorf("harness corrupted %v, twin broke %v", corrupted, brokenSess)
			}
			if len(corrupted) == 0 {
				t.Errorf("no corruption at 24×3 on the baseline twin: the comparison proves nothing (outcomes %+v)", res.Outcomes)
			}
			if res.Outcomes.Done == 0 || res.Outcomes.MaxRounds == 0 {
				t.Errorf("want both done and maxrounds sessions, got %+v", res.Outcomes)
			}
			t.Logf("%s; deviated but invisible sessions: %d", res.Headline(), invisible)
		})
	}
}
