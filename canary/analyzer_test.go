package canary

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

var _ hook.Analyzer = (*Analyzer)(nil)

func TestAnalyzerEmitsFindings(t *testing.T) {
	a := NewAnalyzer(Options{})
	if a.Name() != "canary" {
		t.Fatalf("Name = %q", a.Name())
	}
	var got []hook.Event
	pub := hook.WithAnalyzers(hook.PublishFunc(func(ev hook.Event) { got = append(got, ev) }), a)

	pub.Publish(hook.Event{Kind: hook.KindReplay, TS: 1, Body: &hook.Replay{Step: 1}})
	pub.Publish(hook.Event{Kind: hook.KindCanaryPages, TS: 2, Run: "r1", Body: &hook.CanaryPages{
		Step: 41, Policy: "live", PagesTotal: 64, PagesChecked: 8,
		Expected: []uint32{3}, Running: []string{"victim", "writer"}, Transfer: []uint32{50},
		Changed: []hook.PageChange{chg(3, "writer"), chg(50, "incoming")},
	}})
	pub.Publish(hook.Event{Kind: hook.KindCanaryPages, TS: 3, Run: "r1", Body: &hook.CanaryPages{
		Step: 42, Policy: "live", PagesTotal: 64, PagesChecked: 8,
		Expected: []uint32{3, 4}, ExpectedOwner: []string{"writer", "victim"}, Running: []string{"victim", "writer"},
		Changed: []hook.PageChange{chg(3, "writer"), chg(12, "victim")},
	}})

	var findings []*hook.Finding
	for _, ev := range got {
		if ev.Kind == hook.KindFinding {
			findings = append(findings, ev.Body.(*hook.Finding))
			if ev.TS != 3 || ev.Run != "r1" {
				t.Errorf("finding not stamped with its event: %+v", ev)
			}
		}
	}
	if len(findings) != 2 {
		t.Fatalf("got %d findings, want 2 (one live overwrite, one missing store): %+v", len(findings), findings)
	}
	live, miss := findings[0], findings[1]
	if live.Severity != hook.SevError || live.Analyzer != "canary" || live.Evidence["victim"] != "victim" ||
		live.Evidence["page"] != "12" || live.Evidence["step"] != "42" || !strings.Contains(live.Summary, "LIVE-PAGE-OVERWRITE") {
		t.Errorf("live finding: %+v", live)
	}
	if miss.Severity != hook.SevError || miss.Evidence["class"] != "missing-store" || miss.Evidence["page"] != "4" ||
		miss.Evidence["owner"] != "victim" || !strings.Contains(miss.Summary, "step 42") {
		t.Errorf("missing-store finding: %+v", miss)
	}
	s := a.Result()
	if s.Replays != 2 || s.PagesChecked != 16 || s.ExpectedWrites != 2 || s.BenignTransferWrites != 1 ||
		s.LivePageOverwrites != 1 || s.MissingStores != 1 || s.Policy != "live" || s.Coverage != 0.125 {
		t.Fatalf("summary: %+v", s)
	}
}

func TestAnalyzerBoundsFindings(t *testing.T) {
	a := NewAnalyzer(Options{MaxFindings: 3})
	n := 0
	for step := range uint64(5) {
		a.Observe(hook.Event{Kind: hook.KindCanaryPages, Body: &hook.CanaryPages{
			Step: step, Running: []string{"v"}, Changed: []hook.PageChange{chg(1, "v")},
		}}, func(hook.Event) { n++ })
	}
	s := a.Result()
	if n != 3 || s.FindingsSuppressed != 2 || s.LivePageOverwrites != 5 {
		t.Fatalf("emitted %d, summary %+v", n, s)
	}
}

func TestAnalyzerIgnoresOtherKinds(t *testing.T) {
	a := NewAnalyzer(Options{})
	a.Observe(hook.Event{Kind: hook.KindSession, Body: &hook.Session{ID: "s"}}, func(hook.Event) { t.Fatal("emitted") })
	a.Observe(hook.Event{Kind: hook.KindCanaryPages, Body: (*hook.CanaryPages)(nil)}, func(hook.Event) { t.Fatal("emitted") })
	if s := a.Result(); s.Replays != 0 {
		t.Fatalf("replays %d", s.Replays)
	}
}

// TestAnalyzerConcurrentObserveAndResult: Observe and Result may be called
// from different goroutines (a collector's analyzers, a live view's
// snapshots). Under -race this is the canary's concurrency check (the twin
// tests, serial, skip there); the counts must also add up.
func TestAnalyzerConcurrentObserveAndResult(t *testing.T) {
	const workers, each = 4, 200
	a := NewAnalyzer(Options{})
	var emitted atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
				_ = a.Result()
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				a.Observe(hook.Event{Kind: hook.KindCanaryPages, Body: &hook.CanaryPages{
					Step: uint64(w*each + i), Policy: "live", PagesTotal: 64, PagesChecked: 8,
					Running: []string{"v"}, Changed: []hook.PageChange{chg(1, "v")},
				}}, func(hook.Event) { emitted.Add(1) })
			}
		}()
	}
	wg.Wait()
	close(done)
	s := a.Result()
	if s.Replays != workers*each || s.LivePageOverwrites != workers*each || emitted.Load() != workers*each {
		t.Fatalf("replays %d, live overwrites %d, findings %d; want %d each", s.Replays, s.LivePageOverwrites, emitted.Load(), workers*each)
	}
}
