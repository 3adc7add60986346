package tui

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/safetext"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/spec/runconfig"
)

const (
	bucketNS       = int64(time.Second) // sparkline bucket width, in event time
	seriesBuckets  = 240                // buckets each series keeps
	maxFindings    = 4096               // findings the log keeps (newest)
	maxMismatches  = 8                  // latest checksum mismatches kept
	maxGPUSparks   = 8                  // devices with a utilisation history
	maxSessionRows = 4096               // sessions the sessions table keeps (newest)
)

// SessionFindings is the analyzer name of the findings the dashboard makes
// of corrupted sessions.
const SessionFindings = "session"

// series is a ring of per-bucket values over event time: one bucket per
// second of the events' own timestamps, so a replayed or simulated run draws
// the same curves as it did live.
type series struct {
	max  bool // bucket value is the maximum of its samples (else the sum)
	vals [seriesBuckets]float64
	last int64 // bucket index of the newest sample; valid when any
	any  bool
}

func (s *series) add(ts int64, v float64) {
	b := ts / bucketNS
	if !s.any {
		s.any, s.last = true, b
	}
	if b > s.last {
		for i := s.last + 1; i <= b && i <= s.last+seriesBuckets; i++ {
			s.vals[mod(i)] = 0
		}
		s.last = b
	}
	if b <= s.last-seriesBuckets {
		return // older than the ring
	}
	p := &s.vals[mod(b)]
	if s.max {
		if v > *p {
			*p = v
		}
	} else {
		*p += v
	}
}

func mod(b int64) int {
	m := b % seriesBuckets
	if m < 0 {
		m += seriesBuckets
	}
	return int(m)
}

// window returns the n buckets ending at bucket now, oldest first.
func (s *series) window(now int64, n int) []float64 {
	if n > seriesBuckets {
		n = seriesBuckets
	}
	if n <= 0 {
		return nil
	}
	out := make([]float64, n)
	if !s.any {
		return out
	}
	for i := 0; i < n; i++ {
		b := now - int64(n-1-i)
		if b > s.last || b <= s.last-seriesBuckets {
			continue
		}
		out[i] = s.vals[mod(b)]
	}
	return out
}

// FindingItem is one line of the findings log, its text already quoted for
// the terminal.
type FindingItem struct {
	Seq      uint64 // 1-based arrival number
	TS       int64
	Analyzer string
	Severity hook.Severity
	Summary  string
	Source   string
	Evidence []KV // sorted by key
}

// KV is one evidence entry.
type KV struct{ Key, Value string }

// matches reports whether the item contains the filter text (case-insensitive).
func (f *FindingItem) matches(filter string) bool {
	if filter == "" {
		return true
	}
	filter = strings.ToLower(filter)
	if strings.Contains(strings.ToLower(f.Summary), filter) || strings.Contains(f.Analyzer, filter) ||
		strings.Contains(string(f.Severity), filter) {
		return true
	}
	for _, kv := range f.Evidence {
		if strings.Contains(strings.ToLower(kv.Value), filter) {
			return true
		}
	}
	return false
}

// SessionsState is what the sessions panel shows.
type SessionsState struct {
	Outcomes  map[string]int
	Total     int
	Corrupted int
	Unknown   int // outcome classes this build does not know
	Lo, Hi    float64
	Deviated  int
}

// SessionRow is one finished session as the sessions table shows it, its
// text already quoted for the terminal.
type SessionRow struct {
	Seq       uint64 // 1-based arrival number within the run
	TS        int64
	ID        string
	Outcome   string
	Corrupted bool
	Rounds    int    // rounds answered
	Round     int    // the round that went wrong (1-based; 0: none or unknown)
	Request   string // that round's engine request id, "" when it has none
	Reason    string
	Excerpt   string // the reply that ended a corrupted session (bounded by its producer)
}

// SchedState is what the scheduler panel shows.
type SchedState struct {
	Observations  uint64
	Latest        hook.Sched
	Retractions   int // retraction observations
	RetractedReqs int
	PeakRunning   int
	PeakUsage     float64
}

// CUDAState is what the CUDA panel shows.
type CUDAState struct {
	Calls         uint64
	GraphLaunches uint64
	Errors        uint64
	Top           []CallCount // most frequent calls, at most 4
	Rate          float64     // calls per second of event time, last full bucket
	PIDs          int
}

// CallCount is a driver call and how often it was seen.
type CallCount struct {
	Call  string
	Count uint64
}

// Cursor is a replay's position, written by the replay goroutine and read by
// the view.
type CursorState struct {
	FirstTS, LastTS, AtTS int64
	Speed                 float64 // 0: as fast as possible
	Done                  bool
}

// State is an immutable snapshot of everything the panels show, taken once a
// frame. Slices in it are never modified after the snapshot.
type State struct {
	Source string
	Config *hook.RunConfig
	// Contradictions are settings a statement (--config) and the engine's
	// own report, or two engine processes, gave different values for.
	Contradictions []string
	Tool           string
	Run            string
	Host           string
	Elapsed        time.Duration

	Events          uint64  // delivered to the view
	Dropped         uint64  // lost by the view's live subscription
	ProducerDropped uint64  // reported lost by producers (run.end)
	Rate            float64 // events per wall second arriving at the view
	ByKind          [16]uint64
	LastTS          int64
	RunEnded        bool
	Cursor          *CursorState
	SourceDone      bool
	SourceStatus    string // the source's own line (connections, progress)
	SourceErr       string

	Sessions SessionsState
	// SessionRows are the run's finished sessions, oldest first, at most
	// maxSessionRows (the newest); SessionRowsTotal counts all of them.
	SessionRows      []SessionRow
	SessionRowsTotal uint64
	// Sparklines, oldest first, one value per second of event time, ending at
	// the newest event's second; as many as the widest panel can show.
	SessDone, SessBad        []float64
	SchedRunning, SchedUsage []float64
	SchedQueue, SchedRetract []float64
	CUDASpark                []float64
	Checksum                 *checksum.Summary
	ChecksumEvents           uint64
	Mismatches               []string // latest checksum mismatch summaries, newest last
	Canary                   *canary.Summary
	CanaryEvents             uint64
	GraphDiff                *graphdiff.Summary
	GraphDiffEvents          uint64
	Sched                    SchedState
	GPU                      *hook.GPU
	GPUUtil                  map[int][]float64 // utilisation history by device index
	GPUSamples               uint64
	CUDA                     CUDAState
	Findings                 []FindingItem // oldest first, at most maxFindings
	FindingsTotal            uint64
	BySeverity               map[hook.Severity]uint64
	Steps                    []Step
	StepsDone                bool
	// Sources groups the events by host and role (SourceRow), by name;
	// nil when no event named its source.
	Sources []SourceRow
}

// aggregator folds events into the dashboard's bounded aggregates. It is
// owned by the program's Update goroutine.
type aggregator struct {
	source         string
	config         *hook.RunConfig
	engine         runconfig.EngineMerge // engine processes' run.start reports merged into config
	contradictions []string
	tool           string
	run            string
	host           string
	resetOn        bool // a run.start for a new run clears per-run aggregates

	seenStart bool
	startRun  string // raw run id of the last run.start

	events, prodDropped uint64
	byKind              [16]uint64
	groups              sourceGroups // events by host and role, across runs
	lastTS              int64
	runEnded            bool

	outcomes  map[string]int
	sessions  int
	corrupted int
	unknown   int
	deviated  int
	sessDone  series
	sessBad   series
	rows      []SessionRow
	rowsTotal uint64

	sched                                     SchedState
	schedRunning, schedUsage, schedQ, schedRt series

	checksumEvents, canaryEvents, graphdiffEvents uint64
	mismatches                                    []string
	summaries                                     analyzers.Summaries

	gpu        *hook.GPU
	gpuSamples uint64
	gpuUtil    [maxGPUSparks]series // utilisation per device index, max per second

	cudaCalls, cudaGraph, cudaErr uint64
	cudaBy                        map[string]uint64
	cudaPIDs                      map[uint32]struct{}
	cudaSpark                     series

	findings      []FindingItem
	findingsTotal uint64
	bySev         map[hook.Severity]uint64

	steps     []Step
	stepsDone bool
}

func newAggregator(source string) *aggregator {
	a := &aggregator{source: source, resetOn: true}
	a.resetRun()
	a.bySev = map[hook.Severity]uint64{}
	return a
}

// resetRun clears what belongs to one run (the findings log and step list
// stay: they are the story across runs).
func (a *aggregator) resetRun() {
	a.outcomes = map[string]int{}
	a.sessions, a.corrupted, a.unknown, a.deviated = 0, 0, 0, 0
	a.sessDone, a.sessBad = series{}, series{}
	a.rows, a.rowsTotal = nil, 0
	a.sched = SchedState{}
	a.schedRunning, a.schedUsage, a.schedQ, a.schedRt = series{max: true}, series{max: true}, series{max: true}, series{}
	a.checksumEvents, a.canaryEvents, a.graphdiffEvents = 0, 0, 0
	a.mismatches = nil
	a.summaries = analyzers.Summaries{}
	a.cudaCalls, a.cudaGraph, a.cudaErr = 0, 0, 0
	a.cudaBy = map[string]uint64{}
	a.cudaPIDs = map[uint32]struct{}{}
	a.cudaSpark = series{}
	a.runEnded = false
}

// apply folds one event in.
func (a *aggregator) apply(ev *hook.Event) {
	a.events++
	a.groups.add(ev)
	if int(ev.Kind) < len(a.byKind) {
		a.byKind[ev.Kind]++
	}
	if ev.TS > a.lastTS {
		a.lastTS = ev.TS
	}
	switch b := ev.Body.(type) {
	case *hook.RunStart:
		if a.config != nil && a.seenStart && ev.Run == a.startRun && engineReport(b.Config) {
			// An engine process of this run reporting its own settings
			// (provenance engine): merged into the run's configuration,
			// contradictions kept, never silently replacing a statement.
			cfg := cloneConfig(*a.config)
			for _, c := range a.engine.Merge(&cfg, b.Config, ev.Src.Role, reporterOf(ev.Src, b)) {
				if len(a.contradictions) < 16 {
					a.contradictions = append(a.contradictions, safetext.Quote(c.String()))
				}
			}
			a.config = &cfg
			break
		}
		// A second run.start begins another run (the demo runs several):
		// unless it names the same run, per-run panels start over.
		if a.resetOn && a.seenStart && (ev.Run == "" || ev.Run != a.startRun) {
			a.resetRun()
		}
		a.seenStart, a.startRun = true, ev.Run
		cfg := b.Config
		a.config, a.tool = &cfg, safetext.Quote(b.Tool)
		if ev.Run != "" {
			a.run = safetext.Quote(ev.Run)
		}
		a.host = b.Host.Hostname
		if a.host == "" {
			a.host = strings.Trim(b.Host.OS+"/"+b.Host.Arch, "/")
		}
		a.host = safetext.Quote(a.host)
	case *hook.RunEnd:
		a.prodDropped += b.Dropped
		a.runEnded = true
	case *hook.Session:
		a.sessions++
		a.addSession(ev, b)
		known := false
		for _, o := range hook.Outcomes {
			if o == b.Outcome {
				known = true
			}
		}
		if !known {
			a.unknown++
			break
		}
		a.outcomes[b.Outcome]++
		if b.Deviated {
			a.deviated++
		}
		if outcome.IsCorrupted(b.Outcome) {
			a.corrupted++
			a.sessBad.add(ev.TS, 1)
		} else {
			a.sessDone.add(ev.TS, 1)
		}
	case *hook.Sched:
		s := &a.sched
		s.Observations++
		s.Latest = *b
		if b.RunningReq > s.PeakRunning {
			s.PeakRunning = b.RunningReq
		}
		if b.TokenUsage > s.PeakUsage {
			s.PeakUsage = b.TokenUsage
		}
		if b.Phase == "retract" || b.Retracted > 0 {
			s.Retractions++
			s.RetractedReqs += b.Retracted
			a.schedRt.add(ev.TS, 1)
		}
		a.schedRunning.add(ev.TS, float64(b.RunningReq))
		a.schedUsage.add(ev.TS, b.TokenUsage)
		a.schedQ.add(ev.TS, float64(b.QueueReq))
	case *hook.RoomChecksum:
		a.checksumEvents++
	case *hook.CanaryPages:
		a.canaryEvents++
	case *hook.GraphDiffSample:
		a.graphdiffEvents++
	case *hook.GPU:
		a.gpuSamples++
		a.gpu = b
		for _, d := range b.Devices {
			if d.Index >= 0 && d.Index < maxGPUSparks {
				a.gpuUtil[d.Index].max = true
				a.gpuUtil[d.Index].add(ev.TS, float64(d.UtilGPU))
			}
		}
	case *hook.CUDA:
		a.cudaCalls++
		call := b.Call
		if len(a.cudaBy) < 256 || a.cudaBy[call] > 0 {
			a.cudaBy[call]++
		}
		if strings.HasPrefix(call, "cuGraphLaunch") {
			a.cudaGraph++
		}
		if b.Ret != 0 {
			a.cudaErr++
		}
		if len(a.cudaPIDs) < 1024 {
			a.cudaPIDs[b.PID] = struct{}{}
		}
		a.cudaSpark.add(ev.TS, 1)
	case *hook.Finding:
		a.addFinding(ev, b)
	}
}

func (a *aggregator) addFinding(ev *hook.Event, b *hook.Finding) {
	a.findingsTotal++
	a.bySev[b.Severity]++
	it := FindingItem{
		Seq: a.findingsTotal, TS: ev.TS, Analyzer: safetext.Quote(b.Analyzer), Severity: b.Severity,
		Summary: safetext.Quote(b.Summary),
	}
	if ev.Src.Proc != "" || ev.Src.Node != "" {
		src := ev.Src.Proc
		if ev.Src.Node != "" {
			src = ev.Src.Node + "/" + src
		}
		if ev.Src.PID != 0 {
			src += "[" + strconv.Itoa(int(ev.Src.PID)) + "]"
		}
		it.Source = safetext.Quote(src)
	}
	keys := make([]string, 0, len(b.Evidence))
	for k := range b.Evidence {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		it.Evidence = append(it.Evidence, KV{safetext.Quote(k), safetext.Quote(b.Evidence[k])})
	}
	if len(a.findings) >= maxFindings {
		// Start a fresh slice with the newest half: slices handed out in
		// earlier States stay intact.
		keep := a.findings[len(a.findings)-maxFindings/2:]
		a.findings = append(make([]FindingItem, 0, maxFindings), keep...)
	}
	a.findings = append(a.findings, it)
	if b.Analyzer == checksum.AnalyzerName && b.Severity == hook.SevError {
		a.mismatches = append(a.mismatches, it.Summary)
		if len(a.mismatches) > maxMismatches {
			a.mismatches = append([]string(nil), a.mismatches[len(a.mismatches)-maxMismatches:]...)
		}
	}
}

// addSession keeps a session's row for the table and makes a finding of a
// corrupted one: kind, session, round, request id and excerpt, quoted.
func (a *aggregator) addSession(ev *hook.Event, b *hook.Session) {
	a.rowsTotal++
	r := SessionRow{Seq: a.rowsTotal, TS: ev.TS, ID: quoteAll(b.ID), Outcome: quoteAll(b.Outcome), Corrupted: outcome.IsCorrupted(b.Outcome),
		Rounds: b.Rounds, Round: b.Round, Reason: quoteAll(b.Reason), Excerpt: quoteAll(b.Excerpt)}
	req := ""
	if b.Round >= 1 && b.Round <= len(b.Requests) {
		req = b.Requests[b.Round-1]
	}
	r.Request = quoteAll(req)
	if len(a.rows) >= maxSessionRows {
		// A fresh slice with the newest half: rows handed out in earlier
		// States stay intact.
		keep := a.rows[len(a.rows)-maxSessionRows/2:]
		a.rows = append(make([]SessionRow, 0, maxSessionRows), keep...)
	}
	a.rows = append(a.rows, r)
	if !r.Corrupted {
		return
	}
	sev := hook.SevError
	if b.Outcome == hook.OutcomeError {
		sev = hook.SevWarn // a failed request: the server or the network, until the run says otherwise
	}
	sum := "session " + b.ID + " " + b.Outcome
	evid := map[string]string{"kind": b.Outcome, "session": b.ID}
	if b.Round > 0 {
		sum += " at round " + strconv.Itoa(b.Round)
		evid["round"] = strconv.Itoa(b.Round)
	}
	if b.Reason != "" {
		sum += ": " + b.Reason
		evid["reason"] = b.Reason
	}
	if req != "" {
		evid["request"] = req
	}
	if b.Excerpt != "" {
		evid["excerpt"] = b.Excerpt
	}
	// addFinding quotes every string for the terminal.
	a.addFinding(ev, &hook.Finding{Analyzer: SessionFindings, Severity: sev, Summary: sum, Evidence: evid})
}

// setSummaries takes the analyzers' latest summaries (nil: none polled).
func (a *aggregator) setSummaries(s *analyzers.Summaries) {
	if s != nil {
		a.summaries = *s
	}
}

// snapshot returns the State for one frame. spark is the sparkline length.
func (a *aggregator) snapshot(spark int) State {
	s := State{
		Source: a.source, Config: a.config, Contradictions: slices.Clone(a.contradictions), Tool: a.tool, Run: a.run, Host: a.host,
		Events: a.events, ProducerDropped: a.prodDropped, ByKind: a.byKind, LastTS: a.lastTS, RunEnded: a.runEnded,
		ChecksumEvents: a.checksumEvents, CanaryEvents: a.canaryEvents, GraphDiffEvents: a.graphdiffEvents,
		Mismatches: a.mismatches, Sched: a.sched, GPU: a.gpu, GPUSamples: a.gpuSamples,
		Findings: a.findings, FindingsTotal: a.findingsTotal, Steps: a.steps, StepsDone: a.stepsDone,
		SessionRows: a.rows, SessionRowsTotal: a.rowsTotal, Sources: a.groups.snapshot(),
	}
	s.BySeverity = make(map[hook.Severity]uint64, len(a.bySev))
	for k, v := range a.bySev {
		s.BySeverity[k] = v
	}
	out := make(map[string]int, len(a.outcomes))
	for k, v := range a.outcomes {
		out[k] = v
	}
	lo, hi := outcome.Wilson(a.corrupted, a.sessions-a.unknown, outcome.Z95)
	s.Sessions = SessionsState{Outcomes: out, Total: a.sessions, Corrupted: a.corrupted, Unknown: a.unknown, Lo: lo, Hi: hi, Deviated: a.deviated}
	now := a.lastTS / bucketNS
	s.SessDone, s.SessBad = a.sessDone.window(now, spark), a.sessBad.window(now, spark)
	s.SchedRunning, s.SchedUsage = a.schedRunning.window(now, spark), a.schedUsage.window(now, spark)
	s.SchedQueue, s.SchedRetract = a.schedQ.window(now, spark), a.schedRt.window(now, spark)
	s.CUDASpark = a.cudaSpark.window(now, spark)
	if a.gpu != nil {
		s.GPUUtil = map[int][]float64{}
		for _, d := range a.gpu.Devices {
			if d.Index >= 0 && d.Index < maxGPUSparks {
				s.GPUUtil[d.Index] = a.gpuUtil[d.Index].window(now, spark)
			}
		}
	}
	s.CUDA = CUDAState{Calls: a.cudaCalls, GraphLaunches: a.cudaGraph, Errors: a.cudaErr, PIDs: len(a.cudaPIDs)}
	if w := a.cudaSpark.window(now, 2); len(w) == 2 {
		s.CUDA.Rate = w[0] // the last complete second
	}
	for c, n := range a.cudaBy {
		s.CUDA.Top = append(s.CUDA.Top, CallCount{safetext.Quote(c), n})
	}
	sort.Slice(s.CUDA.Top, func(i, j int) bool {
		if s.CUDA.Top[i].Count != s.CUDA.Top[j].Count {
			return s.CUDA.Top[i].Count > s.CUDA.Top[j].Count
		}
		return s.CUDA.Top[i].Call < s.CUDA.Top[j].Call
	})
	if len(s.CUDA.Top) > 4 {
		s.CUDA.Top = s.CUDA.Top[:4]
	}
	// Each poll's summaries are fresh values (analyzers.Set.Summaries), so
	// the frame may share them.
	s.Checksum, s.Canary, s.GraphDiff = a.summaries.Checksum, a.summaries.Canary, a.summaries.Graphdiff
	return s
}

// engineReport: a run.start configuration an engine process reported about
// itself (a value with provenance "engine").
func engineReport(c hook.RunConfig) bool {
	for _, p := range c.Provenance {
		if p == hook.ProvEngine {
			return true
		}
	}
	return false
}

// reporterOf names the engine process of a run.start: "decode rank 1", "rank 0".
func reporterOf(src hook.Source, b *hook.RunStart) string {
	switch {
	case src.Role != "":
		return fmt.Sprintf("%s rank %d", src.Role, src.Rank)
	case b.TPRank != nil:
		return fmt.Sprintf("rank %d", *b.TPRank)
	}
	return fmt.Sprintf("pid %d", src.PID)
}

// cloneConfig copies c with its maps: a snapshot handed to the view keeps
// the old one unchanged.
func cloneConfig(c hook.RunConfig) hook.RunConfig {
	c.Provenance, c.Extra, c.ServerArgs = maps.Clone(c.Provenance), maps.Clone(c.Extra), maps.Clone(c.ServerArgs)
	c.Inject = slices.Clone(c.Inject)
	return c
}
