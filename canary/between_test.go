package canary

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/pagediff"
)

// TestBetweenPhaseCountsApart: between-phase observations (SPEC.md §7) are
// judged with the rules of §2 — a move's correct target is an expected
// store, a changed page of a running request outside the expected set is a
// live overwrite, an expected page that did not change is a missing store —
// and counted apart from replays, with findings carrying phase "between".
func TestBetweenPhaseCountsApart(t *testing.T) {
	a := NewAnalyzer(Options{})
	var findings []*hook.Finding
	emit := func(ev hook.Event) { findings = append(findings, ev.Body.(*hook.Finding)) }
	// Replay 7: clean.
	a.Observe(hook.Event{Kind: hook.KindCanaryPages, Body: &hook.CanaryPages{
		Step: 7, Policy: "live", PagesTotal: 100, PagesChecked: 10, LivePages: 10, LiveChecked: 10,
		Expected: []uint32{5}, Running: []string{"a", "b"}, Changed: []hook.PageChange{chg(5, "a")},
	}}, emit)
	// The window before replay 8: a's move landed on page 5 (expected); a
	// faulty move wrote page 12 of running request b; c's move (page 20) did
	// not land; page 30 of a request still receiving its transfer changed;
	// page 40, free, changed.
	a.Observe(hook.Event{Kind: hook.KindCanaryPages, Body: &hook.CanaryPages{
		Phase: string(pagediff.PhaseBetween), Step: 8, Policy: "live", PagesTotal: 100, PagesChecked: 10, LivePages: 12, LiveChecked: 9,
		Expected: []uint32{5, 20}, ExpectedOwner: []string{"a", "c"}, Running: []string{"a", "b", "c"}, Transfer: []uint32{30},
		Changed:     []hook.PageChange{chg(5, "a"), chg(12, "b"), chg(30, "incoming"), chg(40, "")},
		SlotChecked: true,
	}}, emit)
	s := a.Result()
	if s.Replays != 1 || s.ExpectedWrites != 1 || s.LivePageOverwrites != 0 || s.MissingStores != 0 || s.PagesChecked != 10 {
		t.Fatalf("replay counters took between-phase results: %+v", s)
	}
	b := s.Between
	if s.BetweenChecks != 1 || b == nil {
		t.Fatalf("between_checks %d, between %+v", s.BetweenChecks, b)
	}
	if b.ExpectedWrites != 1 || b.LivePageOverwrites != 1 || b.MissingStores != 1 || b.BenignTransferWrites != 1 ||
		b.FreePageWrites != 1 || b.SlotCheckedChecks != 1 || b.PagesChecked != 10 || b.Policy != "live" ||
		b.LiveCoverage == nil || *b.LiveCoverage != 0.75 {
		t.Fatalf("between summary: %+v", b)
	}
	if len(b.Samples) == 0 || b.Samples[0].Class != ClassLiveOverwrite.String() || b.Samples[0].Page != 12 || b.Samples[0].Owner != "b" {
		t.Fatalf("between samples, most severe first: %+v", b.Samples)
	}
	if !s.Findings() {
		t.Fatal("Findings() ignores between-phase overwrites")
	}
	if len(findings) != 2 {
		t.Fatalf("%d findings, want a live overwrite and a missing store: %+v", len(findings), findings)
	}
	live, miss := findings[0], findings[1]
	if live.Evidence["phase"] != string(pagediff.PhaseBetween) || live.Evidence["victim"] != "b" || live.Evidence["page"] != "12" ||
		live.Evidence["step"] != "8" || live.Evidence["class"] != ClassLiveOverwrite.String() || !strings.Contains(live.Summary, "between replays") {
		t.Errorf("between live finding: %+v", live)
	}
	if miss.Evidence["phase"] != string(pagediff.PhaseBetween) || miss.Evidence["class"] != ClassMissingStore || miss.Evidence["page"] != "20" ||
		miss.Evidence["owner"] != "c" || !strings.Contains(miss.Summary, "between replays") {
		t.Errorf("between missing-store finding: %+v", miss)
	}
	// Replay findings carry no phase (unchanged shape).
	a.Observe(hook.Event{Kind: hook.KindCanaryPages, Body: &hook.CanaryPages{
		Phase: string(pagediff.PhaseReplay), Step: 8, Running: []string{"b"}, Changed: []hook.PageChange{chg(12, "b")},
	}}, emit)
	if f := findings[len(findings)-1]; f.Evidence["phase"] != "" || strings.Contains(f.Summary, "between") {
		t.Errorf("replay finding: %+v", f)
	}
	if s := a.Result(); s.Replays != 2 || s.LivePageOverwrites != 1 || s.BetweenChecks != 1 {
		t.Fatalf("explicit phase replay: %+v", s)
	}
}

// TestBetweenPhaseCollateralAndRewritten: a move target the source compared
// slot by slot — collateral bytes beside the moved slot make a live
// overwrite naming the page's owner; a target whose slot already held the
// moved row is rewritten, not missing.
func TestBetweenPhaseCollateralAndRewritten(t *testing.T) {
	r := Classify(&hook.CanaryPages{
		Phase: string(pagediff.PhaseBetween), Step: 3, Expected: []uint32{5, 6}, Running: []string{"a", "b"},
		Changed: []hook.PageChange{chg(5, "a")}, Collateral: []hook.PageChange{chg(5, "a")},
		Rewritten: []uint32{6}, SlotChecked: true,
	})
	if !r.Between || r.Count(ClassExpectedStore) != 1 || r.Count(ClassLiveOverwrite) != 1 || len(r.Missing) != 0 || r.Rewritten != 1 {
		t.Fatalf("result: %+v", r)
	}
}

// TestUnknownPhaseNotJudged: a phase this analyzer does not know is counted,
// not judged as a replay.
func TestUnknownPhaseNotJudged(t *testing.T) {
	a := NewAnalyzer(Options{})
	a.Observe(hook.Event{Kind: hook.KindCanaryPages, Body: &hook.CanaryPages{
		Phase: "sweep-later", Step: 1, Running: []string{"v"}, Changed: []hook.PageChange{chg(1, "v")},
	}}, func(hook.Event) { t.Fatal("emitted a finding for an unknown phase") })
	s := a.Result()
	if s.UnknownPhase != 1 || s.Replays != 0 || s.BetweenChecks != 0 || s.Findings() {
		t.Fatalf("summary: %+v", s)
	}
}

// TestSummaryJSONBetween: without between checks the JSON says
// between_checks 0 and has no between object; with them, the object.
func TestSummaryJSONBetween(t *testing.T) {
	var run Run
	run.Add(&ReplayResult{Step: 1, Policy: "live"})
	b, _ := json.Marshal(run.Summary())
	if !strings.Contains(string(b), `"between_checks":0`) || strings.Contains(string(b), `"between":`) {
		t.Fatalf("no between checks: %s", b)
	}
	run.Add(&ReplayResult{Between: true, Step: 2, Policy: "live", PagesChecked: 4, PagesTotal: 8})
	b, _ = json.Marshal(run.Summary())
	if !strings.Contains(string(b), `"between_checks":1`) || !strings.Contains(string(b), `"between":{"policy":"live","pages_checked":4,"pages_total":8,"coverage":0.5`) {
		t.Fatalf("one between check: %s", b)
	}
}
