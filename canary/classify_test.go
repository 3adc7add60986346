package canary

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func chg(page uint32, owner string) hook.PageChange {
	return hook.PageChange{Page: page, Owner: owner, Before: hook.Hex64(page), After: hook.Hex64(page) + 1}
}

func TestClassifyTable(t *testing.T) {
	base := func() *hook.CanaryPages {
		return &hook.CanaryPages{
			Step: 9, Policy: "live", PagesTotal: 100, PagesChecked: 10,
			Expected: []uint32{10, 20},
			Transfer: []uint32{40, 41},
			Running:  []string{"req-a", "req-b"},
		}
	}
	cases := []struct {
		name    string
		mod     func(*hook.CanaryPages)
		change  hook.PageChange
		want    Class
		missing []uint32
	}{
		{name: "store lands on an expected page", change: chg(10, "req-a"), want: ClassExpectedStore, missing: []uint32{20}},
		{name: "padded row writes page 0", mod: func(o *hook.CanaryPages) { o.Padding = []uint32{0} }, change: chg(0, ""), want: ClassExpectedStore, missing: []uint32{10, 20}},
		{name: "transfer during decode into a not-yet-running request", change: chg(40, "req-incoming"), want: ClassBenignTransfer, missing: []uint32{10, 20}},
		{name: "transfer into a free page", change: chg(41, ""), want: ClassBenignTransfer, missing: []uint32{10, 20}},
		{name: "write to a free page", change: chg(77, ""), want: ClassFreePage, missing: []uint32{10, 20}},
		{name: "write to a page held by a request outside the batch", change: chg(55, "req-parked"), want: ClassHeldPage, missing: []uint32{10, 20}},
		{name: "write to a running request's page", change: chg(30, "req-b"), want: ClassLiveOverwrite, missing: []uint32{10, 20}},
		{name: "transfer landing on a running request's page is still live", change: chg(40, "req-a"), want: ClassLiveOverwrite, missing: []uint32{10, 20}},
		{name: "page 0 without padding is not expected", change: chg(0, ""), want: ClassFreePage, missing: []uint32{10, 20}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := base()
			if c.mod != nil {
				c.mod(obs)
			}
			obs.Changed = []hook.PageChange{c.change}
			r := Classify(obs)
			if len(r.Pages) != 1 || r.Pages[0].Class != c.want {
				t.Fatalf("class = %v, want %v", r.Pages, c.want)
			}
			if r.Count(c.want) != 1 {
				t.Fatalf("count(%v) = %d, want 1", c.want, r.Count(c.want))
			}
			var got []uint32
			for _, m := range r.Missing {
				got = append(got, m.Page)
			}
			if !slices.Equal(got, c.missing) {
				t.Fatalf("missing = %v, want %v", got, c.missing)
			}
			if r.Step != 9 || r.Policy != "live" || r.PagesChecked != 10 {
				t.Fatalf("context not carried: %+v", r)
			}
		})
	}
}

// TestTransferDuringDecodeNeverLive is the acceptance property in isolation:
// whatever transfers land while a batch decodes, a page whose owner is not in
// the batch is never a live overwrite.
func TestTransferDuringDecodeNeverLive(t *testing.T) {
	obs := &hook.CanaryPages{Step: 1, Expected: []uint32{1, 2}, Running: []string{"r1", "r2"}}
	for pg := uint32(100); pg < 400; pg++ {
		obs.Transfer = append(obs.Transfer, pg)
		owner := "incoming-" + string(rune('a'+pg%7))
		if pg%3 == 0 {
			owner = ""
		}
		obs.Changed = append(obs.Changed, chg(pg, owner))
	}
	obs.Changed = append(obs.Changed, chg(1, "r1"), chg(2, "r2"))
	r := Classify(obs)
	if r.Count(ClassLiveOverwrite) != 0 || r.Count(ClassBenignTransfer) != 300 || r.Count(ClassExpectedStore) != 2 || len(r.Missing) != 0 {
		t.Fatalf("counts %v missing %v", r.Counts, r.Missing)
	}
	if r.Findings() {
		t.Fatal("Findings() true for a clean replay")
	}
}

func TestClassifyMissingStore(t *testing.T) {
	obs := &hook.CanaryPages{
		Step: 5, Running: []string{"a", "b", "c"},
		Expected:      []uint32{7, 3, 0, 7},
		ExpectedOwner: []string{"a", "b", "", "a"},
		Padding:       []uint32{0},
		Changed:       []hook.PageChange{chg(3, "b")},
	}
	r := Classify(obs)
	// Page 7 (request a, listed twice) did not change: one missing store.
	// Page 0 is padding: never missing even though it is listed as expected.
	if len(r.Missing) != 1 || r.Missing[0].Page != 7 || r.Missing[0].Owner != "a" {
		t.Fatalf("missing = %+v, want page 7 owner a", r.Missing)
	}
	if !r.Findings() {
		t.Fatal("Findings() false with a missing store")
	}
	// Without expected_owner the missing store is still counted, unnamed.
	obs.ExpectedOwner = nil
	r = Classify(obs)
	if len(r.Missing) != 1 || r.Missing[0].Owner != "" {
		t.Fatalf("missing without owners = %+v", r.Missing)
	}
}

// TestClassifierReuse checks that scratch state from one replay does not leak
// into the next.
func TestClassifierReuse(t *testing.T) {
	var c Classifier
	var r ReplayResult
	c.Classify(&hook.CanaryPages{Expected: []uint32{5}, Running: []string{"x"}, Padding: []uint32{0},
		Changed: []hook.PageChange{chg(5, "x"), chg(9, "x")}}, &r)
	if r.Count(ClassLiveOverwrite) != 1 || r.Count(ClassExpectedStore) != 1 {
		t.Fatalf("first: %v", r.Counts)
	}
	c.Classify(&hook.CanaryPages{Running: []string{"y"}, Changed: []hook.PageChange{chg(5, "x"), chg(0, "")}}, &r)
	if r.Count(ClassHeldPage) != 1 || r.Count(ClassFreePage) != 1 || r.Count(ClassLiveOverwrite) != 0 || len(r.Pages) != 2 || len(r.Missing) != 0 {
		t.Fatalf("second replay inherited state: counts %v pages %v missing %v", r.Counts, r.Pages, r.Missing)
	}
}

func TestClassText(t *testing.T) {
	for _, c := range Classes() {
		b, err := c.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Class
		if err := back.UnmarshalText(b); err != nil || back != c {
			t.Fatalf("round trip %v: %v %v", c, back, err)
		}
	}
	if _, err := ClassInvalid.MarshalText(); err == nil {
		t.Fatal("invalid class marshals")
	}
	var c Class
	if err := c.UnmarshalText([]byte("live")); err == nil {
		t.Fatal("unknown class name accepted")
	}
	if ClassLiveOverwrite.String() != "LIVE-PAGE-OVERWRITE" || Class(99).String() != "class(99)" {
		t.Fatal("String")
	}
}

func TestRunAggregatesAndBoundsSamples(t *testing.T) {
	run := Run{SamplesPerClass: 2}
	var cls Classifier
	var r ReplayResult
	for step := uint64(1); step <= 10; step++ {
		obs := &hook.CanaryPages{
			Step: step, Policy: "sweep:4", PagesTotal: 1000, PagesChecked: 250,
			LivePages: 20, LiveChecked: 20,
			Expected: []uint32{1, 2}, Running: []string{"v"},
			Changed: []hook.PageChange{chg(1, "v"), chg(500, "v"), chg(600, "")},
		}
		cls.Classify(obs, &r)
		run.Add(&r)
	}
	s := run.Summary()
	if s.Replays != 10 || s.PagesChecked != 2500 || s.PagesTotal != 10000 || s.Coverage != 0.25 {
		t.Fatalf("coverage: %+v", s)
	}
	if s.LiveCoverage == nil || *s.LiveCoverage != 1 {
		t.Fatalf("live coverage %v", s.LiveCoverage)
	}
	if s.ExpectedWrites != 10 || s.LivePageOverwrites != 10 || s.FreePageWrites != 10 || s.MissingStores != 10 || s.Policy != "sweep:4" {
		t.Fatalf("counts: %+v", s)
	}
	if !s.Findings() {
		t.Fatal("Findings false")
	}
	// 2 samples each of live, missing, free, expected; most severe first.
	if len(s.Samples) != 8 || s.Samples[0].Class != "LIVE-PAGE-OVERWRITE" || s.Samples[0].Step != 1 || s.Samples[0].Page != 500 || s.Samples[0].Owner != "v" {
		t.Fatalf("samples: %+v", s.Samples)
	}
	if s.Samples[2].Class != ClassMissingStore || s.Samples[2].Page != 2 {
		t.Fatalf("missing sample: %+v", s.Samples[2])
	}
	run.Add(&ReplayResult{Policy: "all"})
	if run.Summary().Policy != "mixed" {
		t.Fatal("mixed policies not reported")
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	_ = json.Unmarshal(b, &keys)
	for _, k := range []string{"replays", "pages_checked", "expected_writes", "benign_transfer_writes", "free_page_writes", "live_page_overwrites", "missing_stores", "samples", "coverage", "policy"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("summary JSON lacks %q: %s", k, b)
		}
	}
	var empty Run
	es := empty.Summary()
	if es.LiveCoverage != nil || es.Samples == nil || es.Coverage != 0 {
		t.Fatalf("empty run summary %+v", es)
	}
}

// TestClassifyCollateral: a stray write beside an expected store on the same
// page (stale-outloc's signature) is a live overwrite when the source reports
// it as collateral, although the page itself counts as an expected store.
func TestClassifyCollateral(t *testing.T) {
	obs := &hook.CanaryPages{
		Step: 12, Running: []string{"victim", "other"}, Expected: []uint32{7, 8}, Transfer: []uint32{9},
		Changed: []hook.PageChange{chg(7, "victim"), chg(8, "other")},
		Collateral: []hook.PageChange{
			chg(7, "victim"),
			chg(8, "parked"), // owner outside the batch: held
		},
	}
	r := Classify(obs)
	if r.Count(ClassExpectedStore) != 2 || r.Count(ClassLiveOverwrite) != 1 || r.Count(ClassHeldPage) != 1 || len(r.Pages) != 4 {
		t.Fatalf("counts %v pages %+v", r.Counts, r.Pages)
	}
	live := r.Pages[2]
	if !live.Collateral || live.Class != ClassLiveOverwrite || live.Page != 7 || live.Owner != "victim" {
		t.Fatalf("collateral verdict %+v", live)
	}
	if len(r.Missing) != 0 {
		t.Fatalf("missing %v", r.Missing)
	}
}

// TestClassifyRewritten: an expected page that did not change because its
// store wrote identical bytes is not a missing store, but is counted.
func TestClassifyRewritten(t *testing.T) {
	obs := &hook.CanaryPages{Running: []string{"a", "b"}, Expected: []uint32{1, 2, 3}, Rewritten: []uint32{2}, SlotChecked: true,
		Changed: []hook.PageChange{chg(1, "a")}}
	r := Classify(obs)
	if len(r.Missing) != 1 || r.Missing[0].Page != 3 || r.Rewritten != 1 {
		t.Fatalf("missing %v rewritten %d", r.Missing, r.Rewritten)
	}
	var run Run
	run.Add(&r)
	run.Add(&ReplayResult{})
	if s := run.Summary(); s.RewrittenStores != 1 || s.MissingStores != 1 || s.SlotCheckedReplays != 1 || s.Replays != 2 {
		t.Fatalf("summary %+v", s)
	}
}
