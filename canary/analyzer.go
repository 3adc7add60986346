package canary

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/pagediff"
)

// AnalyzerName is the analyzer's name and its section key in run reports.
const AnalyzerName = "canary"

// DefaultMaxFindings bounds the findings one Analyzer emits per run, so a
// badly broken run cannot flood the bus; the rest are counted in
// Summary.FindingsSuppressed.
const DefaultMaxFindings = 10000

// Options configure an Analyzer.
type Options struct {
	SamplesPerClass int // samples kept per class; 0 means DefaultSamplesPerClass
	MaxFindings     int // findings emitted per run; 0 means DefaultMaxFindings, negative means none
}

// Analyzer judges canary.pages events: it classifies every replay, emits an
// error finding for each live-page overwrite and each missing store, and
// aggregates the run. Observe and Result may be called from different
// goroutines.
type Analyzer struct {
	mu         sync.Mutex
	opts       Options
	cls        Classifier
	res        ReplayResult
	run        Run
	emitted    int
	suppressed uint64
	unknown    uint64 // observations with an unknown phase
}

// NewAnalyzer returns a canary analyzer.
func NewAnalyzer(opts Options) *Analyzer {
	if opts.MaxFindings == 0 {
		opts.MaxFindings = DefaultMaxFindings
	}
	a := &Analyzer{opts: opts}
	a.run.SamplesPerClass = opts.SamplesPerClass
	return a
}

// Name implements hook.Analyzer.
func (a *Analyzer) Name() string { return AnalyzerName }

// Observe implements hook.Analyzer. Events other than canary.pages are ignored.
func (a *Analyzer) Observe(ev hook.Event, emit func(hook.Event)) {
	obs, ok := ev.Body.(*hook.CanaryPages)
	if !ok || obs == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !pagediff.Phase(obs.Phase).Valid() {
		a.unknown++
		return
	}
	a.cls.Classify(obs, &a.res)
	a.run.Add(&a.res)
	if !a.res.Findings() {
		return
	}
	for _, p := range a.res.Pages {
		if p.Class != ClassLiveOverwrite {
			continue
		}
		if a.res.Between {
			a.emit(emit, BetweenLiveOverwriteFinding(a.res.Step, a.res.Policy, p.PageChange))
		} else {
			a.emit(emit, LiveOverwriteFinding(a.res.Step, a.res.Policy, p.PageChange))
		}
	}
	for _, m := range a.res.Missing {
		if a.res.Between {
			a.emit(emit, BetweenMissingStoreFinding(a.res.Step, a.res.Policy, m))
		} else {
			a.emit(emit, MissingStoreFinding(a.res.Step, a.res.Policy, m))
		}
	}
}

func (a *Analyzer) emit(emit func(hook.Event), f *hook.Finding) {
	if a.opts.MaxFindings < 0 || a.emitted >= a.opts.MaxFindings {
		a.suppressed++
		return
	}
	a.emitted++
	emit(hook.Event{Kind: hook.KindFinding, Body: f})
}

// Result returns the run-level aggregate so far.
func (a *Analyzer) Result() Summary {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.run.Summary()
	s.FindingsSuppressed = a.suppressed
	s.UnknownPhase = a.unknown
	return s
}

// LiveOverwriteFinding is the finding for a changed page owned by a running
// request outside the step's expected write set.
func LiveOverwriteFinding(step uint64, policy string, p hook.PageChange) *hook.Finding {
	return &hook.Finding{
		Analyzer: AnalyzerName,
		Severity: hook.SevError,
		Summary: fmt.Sprintf("LIVE-PAGE-OVERWRITE: step %d changed page %d of running request %s outside the step's expected stores",
			step, p.Page, strconv.Quote(p.Owner)),
		Evidence: map[string]string{
			"class":  ClassLiveOverwrite.String(),
			"step":   strconv.FormatUint(step, 10),
			"page":   strconv.FormatUint(uint64(p.Page), 10),
			"victim": p.Owner,
			"before": p.Before.String(),
			"after":  p.After.String(),
			"policy": policy,
		},
	}
}

// MissingStoreFinding is the finding for an expected page whose digest did
// not change across the replay.
func MissingStoreFinding(step uint64, policy string, m MissingStore) *hook.Finding {
	who := ""
	if m.Owner != "" {
		who = " of request " + strconv.Quote(m.Owner)
	}
	ev := map[string]string{
		"class":  ClassMissingStore,
		"step":   strconv.FormatUint(step, 10),
		"page":   strconv.FormatUint(uint64(m.Page), 10),
		"policy": policy,
	}
	if m.Owner != "" {
		ev["owner"] = m.Owner
	}
	return &hook.Finding{
		Analyzer: AnalyzerName,
		Severity: hook.SevError,
		Summary:  fmt.Sprintf("missing store: expected page %d%s did not change across step %d", m.Page, who, step),
		Evidence: ev,
	}
}

// BetweenLiveOverwriteFinding is the finding for a page of a running request
// that changed between two replays (from the previous check's after-snapshot
// to the before-snapshot of replay step) outside the window's expected
// writes. Its evidence carries phase "between".
func BetweenLiveOverwriteFinding(step uint64, policy string, p hook.PageChange) *hook.Finding {
	f := LiveOverwriteFinding(step, policy, p)
	f.Summary = fmt.Sprintf("LIVE-PAGE-OVERWRITE: page %d of running request %s changed between replays (before step %d) outside the writes expected there",
		p.Page, strconv.Quote(p.Owner), step)
	f.Evidence["phase"] = string(pagediff.PhaseBetween)
	return f
}

// BetweenMissingStoreFinding is the finding for a page a known writer
// should have changed between two replays (e.g. the target of a speculative
// move) whose digest did not change. Its evidence carries phase "between".
func BetweenMissingStoreFinding(step uint64, policy string, m MissingStore) *hook.Finding {
	f := MissingStoreFinding(step, policy, m)
	who := ""
	if m.Owner != "" {
		who = " of request " + strconv.Quote(m.Owner)
	}
	f.Summary = fmt.Sprintf("missing store: expected page %d%s did not change between replays (before step %d)", m.Page, who, step)
	f.Evidence["phase"] = string(pagediff.PhaseBetween)
	return f
}
