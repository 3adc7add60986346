package canary

import (
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// DefaultSamplesPerClass bounds how many samples of each class (and of
// missing stores) a Run keeps for the report.
const DefaultSamplesPerClass = 8

// Sample is one judged page kept for the report. For a missing store Class is
// "missing-store" and Before/After are zero (the source lists only changed
// pages' digests).
type Sample struct {
	Step   uint64     `json:"step"`
	Page   uint32     `json:"page"`
	Owner  string     `json:"owner,omitempty"`
	Before hook.Hex64 `json:"before"`
	After  hook.Hex64 `json:"after"`
	Class  string     `json:"class"`
}

// ClassMissingStore is the Sample.Class of an expected page that did not change.
const ClassMissingStore = "missing-store"

// Summary is the run-level aggregate, the `canary` section of `sim run --json`
// and of `kvcanary canary report --json`.
type Summary struct {
	Policy               string   `json:"policy"` // policy of the observations; "mixed" when they disagree
	Replays              uint64   `json:"replays"`
	PagesChecked         uint64   `json:"pages_checked"` // summed over replays
	PagesTotal           uint64   `json:"pages_total"`   // pool pages summed over replays
	Coverage             float64  `json:"coverage"`      // pages_checked / pages_total: pool fraction digested per replay
	LiveCoverage         *float64 `json:"live_coverage,omitempty"`
	ExpectedWrites       uint64   `json:"expected_writes"`
	BenignTransferWrites uint64   `json:"benign_transfer_writes"`
	FreePageWrites       uint64   `json:"free_page_writes"`
	HeldPageWrites       uint64   `json:"held_page_writes"`
	LivePageOverwrites   uint64   `json:"live_page_overwrites"`
	MissingStores        uint64   `json:"missing_stores"`
	RewrittenStores      uint64   `json:"rewritten_stores"`     // expected pages unchanged because the store wrote identical bytes
	SlotCheckedReplays   uint64   `json:"slot_checked_replays"` // replays whose expected pages were compared slot by slot
	FindingsSuppressed   uint64   `json:"findings_suppressed,omitempty"`
	Samples              []Sample `json:"samples"`
	// BetweenChecks counts phase "between" observations (SPEC.md §7): checks
	// of the window between two replays, not replays. 0 means the source
	// sent none, so writers outside a replay were not watched; Between holds
	// their verdicts when there were any.
	BetweenChecks uint64          `json:"between_checks"`
	Between       *BetweenSummary `json:"between,omitempty"`
	// UnknownPhase counts observations with a phase this analyzer does not
	// know; they are not judged.
	UnknownPhase uint64 `json:"unknown_phase"`
}

// BetweenSummary aggregates the between-phase checks (SPEC.md §7). The
// fields mean what the Summary's do, per check instead of per replay;
// live_coverage is the share of the running requests' pages that the
// window's page set (the previous check's) covered.
type BetweenSummary struct {
	Policy               string   `json:"policy"`
	PagesChecked         uint64   `json:"pages_checked"`
	PagesTotal           uint64   `json:"pages_total"`
	Coverage             float64  `json:"coverage"`
	LiveCoverage         *float64 `json:"live_coverage,omitempty"`
	ExpectedWrites       uint64   `json:"expected_writes"`
	BenignTransferWrites uint64   `json:"benign_transfer_writes"`
	FreePageWrites       uint64   `json:"free_page_writes"`
	HeldPageWrites       uint64   `json:"held_page_writes"`
	LivePageOverwrites   uint64   `json:"live_page_overwrites"`
	MissingStores        uint64   `json:"missing_stores"`
	RewrittenStores      uint64   `json:"rewritten_stores"`
	SlotCheckedChecks    uint64   `json:"slot_checked_checks"` // checks whose expected pages were all compared slot by slot
	Samples              []Sample `json:"samples"`
}

// Findings reports whether the run holds evidence of corruption, in replays
// or between them.
func (s *Summary) Findings() bool {
	return s.AllLiveOverwrites() > 0 || s.AllMissingStores() > 0
}

// AllLiveOverwrites counts live-page overwrites in replays and between them:
// the number a headline must quote, since a writer outside a replay (a
// speculative move) overwrites a running request's page just the same.
func (s *Summary) AllLiveOverwrites() uint64 {
	n := s.LivePageOverwrites
	if s.Between != nil {
		n += s.Between.LivePageOverwrites
	}
	return n
}

// AllMissingStores counts missing stores in replays and between them.
func (s *Summary) AllMissingStores() uint64 {
	n := s.MissingStores
	if s.Between != nil {
		n += s.Between.MissingStores
	}
	return n
}

// Run aggregates replay results, and separately between-phase results. The
// zero value keeps DefaultSamplesPerClass samples per class; it is not safe
// for concurrent use.
type Run struct {
	SamplesPerClass int // 0 means DefaultSamplesPerClass; negative keeps none

	replays tally
	between tally
}

// tally is the aggregate of one phase.
type tally struct {
	policy      string
	mixed       bool
	n           uint64
	checked     uint64
	total       uint64
	livePages   uint64
	liveChecked uint64
	counts      [classLimit]uint64
	missing     uint64
	rewritten   uint64
	slotChecked uint64
	samples     [classLimit + 1][]Sample // index classLimit holds missing stores
}

// Add folds one replay (or one between-phase check) into the run.
func (a *Run) Add(r *ReplayResult) {
	limit := a.SamplesPerClass
	if limit == 0 {
		limit = DefaultSamplesPerClass
	}
	if r.Between {
		a.between.add(r, limit)
	} else {
		a.replays.add(r, limit)
	}
}

func (a *tally) add(r *ReplayResult, limit int) {
	if a.n == 0 {
		a.policy = r.Policy
	} else if r.Policy != a.policy {
		a.mixed = true
	}
	a.n++
	a.checked += uint64(max(r.PagesChecked, 0))
	a.total += uint64(max(r.PagesTotal, 0))
	a.livePages += uint64(max(r.LivePages, 0))
	a.liveChecked += uint64(max(r.LiveChecked, 0))
	for c := range r.Counts {
		a.counts[c] += uint64(r.Counts[c])
	}
	a.missing += uint64(len(r.Missing))
	a.rewritten += uint64(max(r.Rewritten, 0))
	if r.SlotChecked {
		a.slotChecked++
	}
	for _, p := range r.Pages {
		if p.Class < classLimit && len(a.samples[p.Class]) < limit {
			a.samples[p.Class] = append(a.samples[p.Class], Sample{
				Step: r.Step, Page: p.Page, Owner: p.Owner, Before: p.Before, After: p.After, Class: p.Class.String(),
			})
		}
	}
	for _, m := range r.Missing {
		if len(a.samples[classLimit]) >= limit {
			break
		}
		a.samples[classLimit] = append(a.samples[classLimit], Sample{
			Step: r.Step, Page: m.Page, Owner: m.Owner, Class: ClassMissingStore,
		})
	}
}

func (a *tally) policyName() string {
	if a.mixed {
		return "mixed"
	}
	return a.policy
}

func (a *tally) coverage() (cov float64, live *float64) {
	if a.total > 0 {
		cov = float64(a.checked) / float64(a.total)
	}
	if a.livePages > 0 {
		lc := float64(a.liveChecked) / float64(a.livePages)
		live = &lc
	}
	return cov, live
}

// orderedSamples lists the samples most severe first: live overwrites,
// missing stores, held, free, transfer, expected.
func (a *tally) orderedSamples() []Sample {
	out := []Sample{}
	order := []int{int(ClassLiveOverwrite), int(classLimit), int(ClassHeldPage), int(ClassFreePage), int(ClassBenignTransfer), int(ClassExpectedStore)}
	for _, i := range order {
		out = append(out, a.samples[i]...)
	}
	return out
}

// Summary returns the aggregate so far. Samples are ordered most severe
// first: live overwrites, missing stores, held, free, transfer, expected.
func (a *Run) Summary() Summary {
	t := &a.replays
	s := Summary{
		Policy:               t.policyName(),
		Replays:              t.n,
		PagesChecked:         t.checked,
		PagesTotal:           t.total,
		ExpectedWrites:       t.counts[ClassExpectedStore],
		BenignTransferWrites: t.counts[ClassBenignTransfer],
		FreePageWrites:       t.counts[ClassFreePage],
		HeldPageWrites:       t.counts[ClassHeldPage],
		LivePageOverwrites:   t.counts[ClassLiveOverwrite],
		MissingStores:        t.missing,
		RewrittenStores:      t.rewritten,
		SlotCheckedReplays:   t.slotChecked,
		Samples:              t.orderedSamples(),
		BetweenChecks:        a.between.n,
	}
	s.Coverage, s.LiveCoverage = t.coverage()
	if b := &a.between; b.n > 0 {
		bs := &BetweenSummary{
			Policy:               b.policyName(),
			PagesChecked:         b.checked,
			PagesTotal:           b.total,
			ExpectedWrites:       b.counts[ClassExpectedStore],
			BenignTransferWrites: b.counts[ClassBenignTransfer],
			FreePageWrites:       b.counts[ClassFreePage],
			HeldPageWrites:       b.counts[ClassHeldPage],
			LivePageOverwrites:   b.counts[ClassLiveOverwrite],
			MissingStores:        b.missing,
			RewrittenStores:      b.rewritten,
			SlotCheckedChecks:    b.slotChecked,
			Samples:              b.orderedSamples(),
		}
		bs.Coverage, bs.LiveCoverage = b.coverage()
		s.Between = bs
	}
	return s
}
