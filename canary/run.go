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
}

// Findings reports whether the run holds evidence of corruption.
func (s *Summary) Findings() bool { return s.LivePageOverwrites > 0 || s.MissingStores > 0 }

// Run aggregates replay results. The zero value keeps DefaultSamplesPerClass
// samples per class; it is not safe for concurrent use.
type Run struct {
	SamplesPerClass int // 0 means DefaultSamplesPerClass; negative keeps none

	policy      string
	mixed       bool
	replays     uint64
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

// Add folds one replay into the run.
func (a *Run) Add(r *ReplayResult) {
	if a.replays == 0 {
		a.policy = r.Policy
	} else if r.Policy != a.policy {
		a.mixed = true
	}
	a.replays++
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
	limit := a.SamplesPerClass
	if limit == 0 {
		limit = DefaultSamplesPerClass
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

// Summary returns the aggregate so far. Samples are ordered most severe
// first: live overwrites, missing stores, held, free, transfer, expected.
func (a *Run) Summary() Summary {
	s := Summary{
		Policy:               a.policy,
		Replays:              a.replays,
		PagesChecked:         a.checked,
		PagesTotal:           a.total,
		ExpectedWrites:       a.counts[ClassExpectedStore],
		BenignTransferWrites: a.counts[ClassBenignTransfer],
		FreePageWrites:       a.counts[ClassFreePage],
		HeldPageWrites:       a.counts[ClassHeldPage],
		LivePageOverwrites:   a.counts[ClassLiveOverwrite],
		MissingStores:        a.missing,
		RewrittenStores:      a.rewritten,
		SlotCheckedReplays:   a.slotChecked,
		Samples:              []Sample{},
	}
	if a.mixed {
		s.Policy = "mixed"
	}
	if a.total > 0 {
		s.Coverage = float64(a.checked) / float64(a.total)
	}
	if a.livePages > 0 {
		lc := float64(a.liveChecked) / float64(a.livePages)
		s.LiveCoverage = &lc
	}
	order := []int{int(ClassLiveOverwrite), int(classLimit), int(ClassHeldPage), int(ClassFreePage), int(ClassBenignTransfer), int(ClassExpectedStore)}
	for _, i := range order {
		s.Samples = append(s.Samples, a.samples[i]...)
	}
	return s
}
