package canary

import (
	"fmt"
	"slices"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/pagediff"
)

// Class is the verdict on one changed page. The order is report order, least
// to most severe.
type Class uint8

// Page classes. See SPEC.md for the rules and their precedence.
const (
	ClassInvalid        Class = iota
	ClassExpectedStore        // "expected-store": a page of this step's out_loc stores or padding
	ClassBenignTransfer       // "benign-transfer": an in-flight transfer's destination, not owned by a running request
	ClassFreePage             // "free-page": a page nobody owns
	ClassHeldPage             // "held-page": owned by a request outside this batch, no transfer in flight
	ClassLiveOverwrite        // "LIVE-PAGE-OVERWRITE": owned by a running request, not expected
	classLimit
)

var classNames = [classLimit]string{
	ClassInvalid:        "",
	ClassExpectedStore:  "expected-store",
	ClassBenignTransfer: "benign-transfer",
	ClassFreePage:       "free-page",
	ClassHeldPage:       "held-page",
	ClassLiveOverwrite:  "LIVE-PAGE-OVERWRITE",
}

// Classes lists every page class in report order.
func Classes() []Class {
	return []Class{ClassExpectedStore, ClassBenignTransfer, ClassFreePage, ClassHeldPage, ClassLiveOverwrite}
}

func (c Class) String() string {
	if c > ClassInvalid && c < classLimit {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// MarshalText implements encoding.TextMarshaler.
func (c Class) MarshalText() ([]byte, error) {
	if c <= ClassInvalid || c >= classLimit {
		return nil, fmt.Errorf("marshal canary class: invalid class %d", uint8(c))
	}
	return []byte(classNames[c]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (c *Class) UnmarshalText(b []byte) error {
	for k := ClassExpectedStore; k < classLimit; k++ {
		if classNames[k] == string(b) {
			*c = k
			return nil
		}
	}
	return fmt.Errorf("parse canary class %q: unknown class", string(b))
}

// PageVerdict is one changed page with its class.
type PageVerdict struct {
	hook.PageChange
	Class Class `json:"class"`
	// Collateral marks a change beside an expected store on an expected page
	// (from CanaryPages.Collateral), judged as if the page were not expected.
	Collateral bool `json:"collateral,omitempty"`
}

// MissingStore is an expected page whose digest did not change across the
// replay: a store that did not land.
type MissingStore struct {
	Page  uint32 `json:"page"`
	Owner string `json:"owner,omitempty"` // from CanaryPages.ExpectedOwner when the source sets it
}

// ReplayResult is the classification of one replay, or of one between-phase
// check (Between true: the window before replay Step).
type ReplayResult struct {
	Between      bool
	Step         uint64
	Policy       string
	PagesTotal   int
	PagesChecked int
	LivePages    int
	LiveChecked  int
	Counts       [classLimit]int // changed pages per class (collateral entries included)
	Pages        []PageVerdict   // every changed page in the order the source listed them, then every collateral entry
	Missing      []MissingStore  // expected, non-padding, non-rewritten pages that did not change, ascending
	Rewritten    int             // expected pages unchanged because their store rewrote identical bytes
	SlotChecked  bool            // collateral and rewritten are complete (CanaryPages.SlotChecked)
}

// Count returns the number of changed pages of class c.
func (r *ReplayResult) Count(c Class) int {
	if c >= classLimit {
		return 0
	}
	return r.Counts[c]
}

// Findings reports whether the replay holds evidence of corruption: a live
// page overwrite or a missing store.
func (r *ReplayResult) Findings() bool {
	return r.Counts[ClassLiveOverwrite] > 0 || len(r.Missing) > 0
}

// Classifier classifies replays, reusing its scratch space between calls. The
// zero value is ready to use; a Classifier is not safe for concurrent use.
type Classifier struct {
	expected  []uint32
	padding   []uint32
	transfer  []uint32
	rewritten []uint32
	running   map[string]struct{}
	owners    map[uint32]string
	seen      []uint32
}

// Classify judges one observation into r, overwriting r but reusing its
// slices. It never fails: malformed observations (duplicate pages, pages
// beyond pages_total, mismatched expected_owner length) are judged as listed.
func (c *Classifier) Classify(obs *hook.CanaryPages, r *ReplayResult) {
	*r = ReplayResult{
		Between: pagediff.Phase(obs.Phase) == pagediff.PhaseBetween,
		Step:    obs.Step, Policy: obs.Policy,
		PagesTotal: obs.PagesTotal, PagesChecked: obs.PagesChecked,
		LivePages: obs.LivePages, LiveChecked: obs.LiveChecked, SlotChecked: obs.SlotChecked,
		Pages: r.Pages[:0], Missing: r.Missing[:0],
	}
	c.expected = sortedSet(c.expected, obs.Expected)
	c.padding = sortedSet(c.padding, obs.Padding)
	c.transfer = sortedSet(c.transfer, obs.Transfer)
	c.rewritten = sortedSet(c.rewritten, obs.Rewritten)
	if c.running == nil {
		c.running = make(map[string]struct{}, len(obs.Running))
	}
	clear(c.running)
	for _, id := range obs.Running {
		if id != "" {
			c.running[id] = struct{}{}
		}
	}

	c.seen = c.seen[:0]
	for _, ch := range obs.Changed {
		cl := c.classOf(ch)
		r.Counts[cl]++
		r.Pages = append(r.Pages, PageVerdict{PageChange: ch, Class: cl})
		c.seen = append(c.seen, ch.Page)
	}
	for _, ch := range obs.Collateral {
		cl := c.unexpectedClass(ch)
		r.Counts[cl]++
		r.Pages = append(r.Pages, PageVerdict{PageChange: ch, Class: cl, Collateral: true})
	}
	if len(c.expected) == 0 {
		return
	}
	slices.Sort(c.seen)
	var owners map[uint32]string
	if len(obs.ExpectedOwner) > 0 {
		if c.owners == nil {
			c.owners = make(map[uint32]string, len(obs.Expected))
		}
		clear(c.owners)
		for i, pg := range obs.Expected {
			if i < len(obs.ExpectedOwner) && obs.ExpectedOwner[i] != "" {
				c.owners[pg] = obs.ExpectedOwner[i]
			}
		}
		owners = c.owners
	}
	for _, pg := range c.expected {
		if contains(c.padding, pg) || contains(c.seen, pg) {
			continue
		}
		if contains(c.rewritten, pg) {
			r.Rewritten++
			continue
		}
		r.Missing = append(r.Missing, MissingStore{Page: pg, Owner: owners[pg]})
	}
}

// classOf applies the precedence of SPEC.md: expected (including padding),
// then live, then transfer, then free, else held.
func (c *Classifier) classOf(ch hook.PageChange) Class {
	if contains(c.expected, ch.Page) || contains(c.padding, ch.Page) {
		return ClassExpectedStore
	}
	return c.unexpectedClass(ch)
}

// unexpectedClass applies rules 2-5 of SPEC.md to a change that no expected
// store explains.
func (c *Classifier) unexpectedClass(ch hook.PageChange) Class {
	if ch.Owner != "" {
		if _, ok := c.running[ch.Owner]; ok {
			return ClassLiveOverwrite
		}
	}
	if contains(c.transfer, ch.Page) {
		return ClassBenignTransfer
	}
	if ch.Owner == "" {
		return ClassFreePage
	}
	return ClassHeldPage
}

// Classify judges one observation with a fresh Classifier.
func Classify(obs *hook.CanaryPages) ReplayResult {
	var c Classifier
	var r ReplayResult
	c.Classify(obs, &r)
	return r
}

func sortedSet(dst, src []uint32) []uint32 {
	dst = append(dst[:0], src...)
	slices.Sort(dst)
	return slices.Compact(dst)
}

func contains(sorted []uint32, v uint32) bool {
	_, ok := slices.BinarySearch(sorted, v)
	return ok
}

// Changes turns the output of Diff over a compacted digest array back into
// page changes: checked[i] is the page whose digests are before[i] and
// after[i], idx holds the indices Diff returned, and owner (may be nil) names
// the request owning a page ("" when free). It appends to dst and returns it;
// indices beyond the arrays are skipped.
func Changes(checked []uint32, before, after []uint64, idx []uint32, owner func(page uint32) string, dst []hook.PageChange) []hook.PageChange {
	for _, i := range idx {
		if int(i) >= len(checked) || int(i) >= len(before) || int(i) >= len(after) {
			continue
		}
		pg := checked[i]
		ch := hook.PageChange{Page: pg, Before: hook.Hex64(before[i]), After: hook.Hex64(after[i])}
		if owner != nil {
			ch.Owner = owner(pg)
		}
		dst = append(dst, ch)
	}
	return dst
}
