package metrics

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/pagediff"
)

// DefaultMaxSources bounds the distinct (run, host, role, rank) label sets a
// Tally keeps.
const DefaultMaxSources = 512

// OverflowHost is the host label of events counted past MaxSources.
const OverflowHost = "_overflow"

// Options configure a Tally.
type Options struct {
	// Run labels events that carry no run id, and the families judged
	// across sources (the analyzers', the collector's) unless the events
	// came from one run: then those carry that run's id, so that one run
	// has one run id (a collector's own id is a fallback, as its --run
	// says). Events of several runs leave them under Run.
	Run string
	// Analyzers are the pipeline's analyzers (the instances the events went
	// through, via hook.WithAnalyzers): the typed summaries of kvcanary's
	// (analyzers.SetOf) are read at scrape time. Analyzers of other types are
	// ignored; an analyzer the list lacks has no series (not measured).
	Analyzers []hook.Analyzer
	// MaxSources bounds distinct sources; 0 means DefaultMaxSources.
	MaxSources int
}

// Tally counts events. It is a hook.Publisher; Publish is safe for
// concurrent use and never blocks on anything but a map lookup the first
// time a source is seen.
type Tally struct {
	opts Options

	set atomic.Pointer[sourceSet]

	mu          sync.Mutex // held to add a source
	order       []*source
	overflowSrc *source // events past MaxSources; not in sources
	overflow    atomic.Uint64

	extraMu   sync.Mutex
	collector func() hook.Stats
	drops     []dropFunc
}

type dropFunc struct {
	reason string
	fn     func() uint64
}

type srcKey struct{ run, host, role, rank string }

const (
	modeGraph = iota
	modeEager
	modeOther
	modeLimit
)

var modeNames = [modeLimit]string{"graph", "eager", "other"}

// outcomeOther is the index of outcomes outside hook.Outcomes.
var outcomeOther = len(hook.Outcomes)

type source struct {
	key      srcKey
	overflow bool
	events   [16]atomic.Uint64 // by hook.Kind
	outcomes [8]atomic.Uint64  // by index in hook.Outcomes; outcomeOther last
	modes    [modeLimit]atomic.Uint64
	dropped  atomic.Uint64 // reported by producers (run.end)

	mu       sync.Mutex
	findings map[findingKey]uint64
}

type findingKey struct{ analyzer, severity, class string }

// NewTally returns an empty Tally.
func NewTally(opts Options) *Tally {
	if opts.MaxSources <= 0 {
		opts.MaxSources = DefaultMaxSources
	}
	return &Tally{opts: opts}
}

// SetCollector makes the collector's counters (connections, rejections)
// part of every scrape.
func (t *Tally) SetCollector(stats func() hook.Stats) {
	t.extraMu.Lock()
	t.collector = stats
	t.extraMu.Unlock()
}

// AddDropCounter reports fn's count as events dropped for reason (a sink of
// this process that fell behind: "otlp_queue").
func (t *Tally) AddDropCounter(reason string, fn func() uint64) {
	t.extraMu.Lock()
	t.drops = append(t.drops, dropFunc{reason, fn})
	t.extraMu.Unlock()
}

// sourceRoleRank returns the role and rank labels of an event source.
//
// sourceRoleRank are the role and rank labels of an engine's events: the
// role the producer states (the validator admits prefill, decode or none)
// and its rank, only with a role.
func sourceRoleRank(src hook.Source) (role, rank string) {
	if src.Role == "" {
		return "", ""
	}
	return src.Role, strconv.Itoa(int(src.Rank))
}

// sourceSet is an immutable snapshot of the known sources, replaced
// (copy on write, under mu) when a new one appears: lookups take no lock.
type sourceSet struct {
	list  []*source
	byKey map[srcKey]*source
}

// linearMax is the most sources looked up by a scan instead of the map
// (comparing a few keys is cheaper than hashing four strings).
const linearMax = 8

func (set *sourceSet) find(k srcKey) *source {
	if set == nil {
		return nil
	}
	if len(set.list) <= linearMax {
		for _, s := range set.list {
			if s.key == k {
				return s
			}
		}
		return nil
	}
	return set.byKey[k]
}

func (t *Tally) source(ev *hook.Event) *source {
	run := ev.Run
	if run == "" {
		run = t.opts.Run
	}
	role, rank := sourceRoleRank(ev.Src)
	k := srcKey{run: run, host: ev.Src.Node, role: role, rank: rank}
	if s := t.set.Load().find(k); s != nil {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.set.Load()
	if s := old.find(k); s != nil {
		return s
	}
	var n int
	if old != nil {
		n = len(old.list)
	}
	if n >= t.opts.MaxSources {
		if t.overflowSrc == nil {
			t.overflowSrc = &source{key: srcKey{host: OverflowHost}, overflow: true}
			t.order = append(t.order, t.overflowSrc)
		}
		return t.overflowSrc
	}
	s := &source{key: k}
	next := &sourceSet{list: make([]*source, 0, n+1), byKey: make(map[srcKey]*source, n+1)}
	if old != nil {
		next.list = append(next.list, old.list...)
		for key, v := range old.byKey {
			next.byKey[key] = v
		}
	}
	next.list = append(next.list, s)
	next.byKey[k] = s
	t.set.Store(next)
	t.order = append(t.order, s)
	return s
}

// Publish implements hook.Publisher.
func (t *Tally) Publish(ev hook.Event) {
	s := t.source(&ev)
	if s.overflow {
		t.overflow.Add(1)
	}
	if int(ev.Kind) < len(s.events) {
		s.events[ev.Kind].Add(1)
	}
	switch b := ev.Body.(type) {
	case *hook.Session:
		if b != nil {
			s.outcomes[outcomeIndex(b.Outcome)].Add(1)
		}
	case *hook.Replay:
		if b != nil {
			switch b.Mode {
			case "graph":
				s.modes[modeGraph].Add(1)
			case "eager":
				s.modes[modeEager].Add(1)
			default:
				s.modes[modeOther].Add(1)
			}
		}
	case *hook.RunEnd:
		if b != nil && b.Dropped > 0 {
			s.dropped.Add(b.Dropped)
		}
	case *hook.Finding:
		if b != nil {
			fk := findingKey{analyzer: bounded(b.Analyzer, knownAnalyzers), severity: bounded(string(b.Severity), knownSeverities), class: findingClass(b)}
			s.mu.Lock()
			if s.findings == nil {
				s.findings = map[findingKey]uint64{}
			}
			s.findings[fk]++
			s.mu.Unlock()
		}
	}
}

func outcomeIndex(o string) int {
	for i, name := range hook.Outcomes {
		if name == o {
			return i
		}
	}
	return outcomeOther
}

var (
	knownAnalyzers  = []string{canary.AnalyzerName, checksum.AnalyzerName, graphdiff.AnalyzerName, "sessions", "repro", "logscan"}
	knownSeverities = []string{string(hook.SevInfo), string(hook.SevWarn), string(hook.SevError)}
	knownClasses    = func() []string {
		var cs []string
		for _, c := range canary.Classes() {
			cs = append(cs, c.String())
		}
		return append(cs, canary.ClassMissingStore)
	}()
)

// bounded keeps v when it is one of the known values, else "other": label
// values from producers never grow the series count.
func bounded(v string, known []string) string {
	if slices.Contains(known, v) {
		return v
	}
	return "other"
}

// findingClass is a finding's class label: the canary's page class from
// the evidence, "mismatch" for the checksum analyzer's, "divergent" for
// graphdiff's, "" when none applies.
func findingClass(f *hook.Finding) string {
	switch f.Analyzer {
	case checksum.AnalyzerName:
		return "mismatch"
	case graphdiff.AnalyzerName:
		return "divergent"
	}
	if c, ok := f.Evidence["class"]; ok {
		return bounded(c, knownClasses)
	}
	return ""
}

// Collect calls fn once per series, with its family, value and label values
// in the family's label order. It reads counters without stopping Publish:
// a scrape sees each counter at some moment during the call.
func (t *Tally) Collect(fn func(f *Family, value float64, labels ...string)) {
	t.mu.Lock()
	srcs := slices.Clone(t.order)
	t.mu.Unlock()
	u := func(v uint64) float64 { return float64(v) }
	for _, s := range srcs {
		k := s.key
		for _, kind := range hook.Kinds() {
			if n := s.events[kind].Load(); n > 0 {
				fn(FamEvents, u(n), k.run, k.host, k.role, k.rank, kind.String())
			}
		}
		for i, o := range hook.Outcomes {
			fn(FamSessions, u(s.outcomes[i].Load()), k.run, k.host, k.role, k.rank, o)
		}
		if n := s.outcomes[outcomeOther].Load(); n > 0 {
			fn(FamSessions, u(n), k.run, k.host, k.role, k.rank, "other")
		}
		for m := range modeLimit {
			if n := s.modes[m].Load(); n > 0 || m != modeOther {
				fn(FamReplays, u(n), k.run, k.host, k.role, k.rank, modeNames[m])
			}
		}
		fn(FamGraphDiffSamples, u(s.events[hook.KindGraphDiffSample].Load()), k.run, k.host, k.role, k.rank)
		fn(FamDropped, u(s.dropped.Load()), k.run, k.host, k.role, k.rank, "producer")
		s.mu.Lock()
		type fc struct {
			k findingKey
			n uint64
		}
		var fs []fc
		for fk, n := range s.findings {
			fs = append(fs, fc{fk, n})
		}
		s.mu.Unlock()
		slices.SortFunc(fs, func(a, b fc) int {
			if a.k.analyzer != b.k.analyzer {
				return compareStr(a.k.analyzer, b.k.analyzer)
			}
			if a.k.severity != b.k.severity {
				return compareStr(a.k.severity, b.k.severity)
			}
			return compareStr(a.k.class, b.k.class)
		})
		for _, f := range fs {
			fn(FamFindings, u(f.n), k.run, k.host, k.role, k.rank, f.k.analyzer, f.k.severity, f.k.class)
		}
	}

	run := t.judgedRun()
	// In analyzers.All's order (canary, graphdiff, checksum), the order the
	// series have always come in.
	sums := analyzers.SetOf(t.opts.Analyzers...).Summaries()
	if s := sums.Canary; s != nil {
		page := func(phase pagediff.Phase, exp, benign, free, held, live, missing uint64) {
			fn(FamCanaryPages, u(exp), run, canary.ClassExpectedStore.String(), string(phase))
			fn(FamCanaryPages, u(benign), run, canary.ClassBenignTransfer.String(), string(phase))
			fn(FamCanaryPages, u(free), run, canary.ClassFreePage.String(), string(phase))
			fn(FamCanaryPages, u(held), run, canary.ClassHeldPage.String(), string(phase))
			fn(FamCanaryPages, u(live), run, canary.ClassLiveOverwrite.String(), string(phase))
			fn(FamMissingStores, u(missing), run, string(phase))
		}
		page(pagediff.PhaseReplay, s.ExpectedWrites, s.BenignTransferWrites, s.FreePageWrites, s.HeldPageWrites, s.LivePageOverwrites, s.MissingStores)
		live := s.LivePageOverwrites
		if b := s.Between; b != nil {
			page(pagediff.PhaseBetween, b.ExpectedWrites, b.BenignTransferWrites, b.FreePageWrites, b.HeldPageWrites, b.LivePageOverwrites, b.MissingStores)
			live += b.LivePageOverwrites
		} else {
			page(pagediff.PhaseBetween, 0, 0, 0, 0, 0, 0)
		}
		fn(FamLiveOverwrites, u(live), run)
		fn(FamSuppressed, u(s.FindingsSuppressed), run, canary.AnalyzerName)
	}
	if s := sums.Graphdiff; s != nil {
		fn(FamJudgedSamples, float64(s.Samples), run)
		fn(FamDivergent, float64(s.Divergent), run)
		fn(FamSuppressed, u(s.FindingsSuppressed), run, graphdiff.AnalyzerName)
	}
	if s := sums.Checksum; s != nil {
		fn(FamRooms, float64(s.Matched), run, "match")
		fn(FamRooms, float64(s.Mismatched), run, "mismatch")
		fn(FamRooms, float64(s.Warmup), run, "warmup")
		fn(FamRooms, float64(s.Missing), run, "one_side")
		fn(FamRoomMismatches, float64(s.Mismatched), run)
	}

	t.extraMu.Lock()
	stats, drops := t.collector, slices.Clone(t.drops)
	t.extraMu.Unlock()
	for _, d := range drops {
		fn(FamDropped, u(d.fn()), run, "", "", "", d.reason)
	}
	if stats != nil {
		st := stats()
		fn(FamConnections, u(st.Connections), run)
		fn(FamConnectionsOpen, float64(st.Open), run)
		fn(FamReceivedBytes, u(st.Bytes), run)
		for _, r := range sortedKeys(st.RejectedBy) {
			fn(FamRejected, u(st.RejectedBy[r]), run, r)
		}
		for _, r := range sortedKeys(st.RefusedBy) {
			fn(FamRefused, u(st.RefusedBy[r]), run, r)
		}
	}
	fn(FamOverflow, u(t.overflow.Load()))
}

// judgedRun is the run id of the families judged across sources: the run
// every counted event came from when there is one, else Options.Run.
func (t *Tally) judgedRun() string {
	run := ""
	if set := t.set.Load(); set != nil {
		for _, s := range set.list {
			switch {
			case s.overflow:
			case run == "":
				run = s.key.run
			case s.key.run != run:
				return t.opts.Run
			}
		}
	}
	if run == "" || t.overflow.Load() > 0 {
		return t.opts.Run // none, or some not told apart
	}
	return run
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sortedKeys(m map[string]uint64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
