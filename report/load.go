package report

import (
	"io"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
)

// Caps on what a Run keeps, so a huge bundle reports in bounded memory; the
// totals are always counted.
const (
	maxEvidence = 12      // rows per evidence table
	maxLeaks    = 10      // quoted excerpts
	maxPoints   = 20000   // scheduler samples and session ends kept for plots (a sample across the run)
	maxJaccards = 100000  // Jaccard values kept for the histogram (a sample across the run)
	maxSteps    = 1 << 22 // steps whose batch size is remembered
)

// RoomMismatch is a room whose prefill and decode digests differ.
type RoomMismatch struct {
	Room    string `json:"room"`
	Pages   string `json:"pages,omitempty"`  // page-table entries that differ
	Tokens  string `json:"tokens,omitempty"` // token ranges of those pages
	Summary string `json:"summary"`
}

// Overwrite is a live-page overwrite: a page of a running request changed
// outside the step's expected stores.
type Overwrite struct {
	Step   string `json:"step"`
	Page   string `json:"page"`
	Victim string `json:"victim"`
	Phase  string `json:"phase,omitempty"`
}

// Divergence is a step whose captured replay disagreed with eager.
type Divergence struct {
	Step    uint64  `json:"step"`
	BS      int     `json:"bs,omitempty"` // batch size of the step; 0 when no replay event names it
	Request string  `json:"request"`
	Session string  `json:"session,omitempty"`
	Jaccard float64 `json:"topk_jaccard"` // -1 when the finding did not state it
	Summary string  `json:"summary"`
}

// Leak is a corrupted session with the reply that ended it.
type Leak struct {
	Session string `json:"session"`
	Outcome string `json:"outcome"`
	Round   int    `json:"round,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Excerpt string `json:"excerpt,omitempty"`
}

// SchedPoint is one scheduler observation, T seconds after the run's first event.
type SchedPoint struct {
	T          float64 `json:"t"`
	Running    int     `json:"running"`
	Queued     int     `json:"queued"`
	TokenUsage float64 `json:"token_usage"`
	Retract    bool    `json:"retract,omitempty"`
	ts         int64
}

// SessionEnd is a finished session, T seconds after the run's first event.
type SessionEnd struct {
	T         float64 `json:"t"`
	ID        string  `json:"id"`
	Corrupted bool    `json:"corrupted"`
	ts        int64
}

// BatchSteps counts the steps of one batch size.
type BatchSteps struct {
	BS        int `json:"bs"`
	Steps     int `json:"steps"`
	Graph     int `json:"graph"`
	Divergent int `json:"divergent"` // steps with at least one graph≠eager finding
}

// Run is what one bundle says.
type Run struct {
	Path     string             `json:"path"`
	Label    string             `json:"label"` // the file's base name
	Manifest traces.Manifest    `json:"manifest"`
	Stats    *sessions.RunStats `json:"-"`
	Summary  outcome.Summary    `json:"summary"`
	CILo     float64            `json:"ci_lo"`
	CIHi     float64            `json:"ci_hi"`

	Truncated        bool   `json:"truncated"`
	TruncationReason string `json:"truncation_reason,omitempty"`
	Skipped          uint64 `json:"skipped"`
	Events           uint64 `json:"events"`

	// Nil when the bundle holds no observation for the layer: not measured.
	Checksum  *checksum.Summary  `json:"checksum,omitempty"`
	Canary    *canary.Summary    `json:"canary,omitempty"`
	GraphDiff *graphdiff.Summary `json:"graphdiff,omitempty"`
	// What the producers said, in their run.end events, they lost: a layer
	// whose evidence they lost is partial, never clean (Verdicts).
	Coverage analyzers.Coverage `json:"coverage"`

	Mismatches     []RoomMismatch `json:"mismatches"`
	MismatchTotal  int            `json:"mismatch_total"`
	Overwrites     []Overwrite    `json:"overwrites"`
	OverwriteTotal int            `json:"overwrite_total"`
	Divergent      []Divergence   `json:"divergent"`
	DivergentTotal int            `json:"divergent_total"`
	Jaccards       []float64      `json:"-"`
	Batches        []BatchSteps   `json:"batches"`
	Sched          []SchedPoint   `json:"-"`
	SessionEnds    []SessionEnd   `json:"-"`
	// What the plots' data keeps of the run: Jaccards, Sched and SessionEnds
	// are systematic samples across the whole run when it is long.
	JaccardsSampled    Sampled `json:"jaccards_sampled"`
	SchedSampled       Sampled `json:"sched_sampled"`
	SessionEndsSampled Sampled `json:"session_ends_sampled"`
	// Scheduler peaks over every observation (the plot may show a sample).
	PeakRunning     int     `json:"peak_running"`
	PeakTokenUsage  float64 `json:"peak_token_usage"`
	RetractObserved int     `json:"retract_observations"`
	Leaks           []Leak  `json:"leaks"`
	LeakTotal       int     `json:"leak_total"`
	T0              int64   `json:"t0_unix_ns"`
	// Start is the configuration of the run.start event, when there is one:
	// it fills what a manifest left unstated (a collector's manifest knows
	// nothing of the workload).
	Start *hook.RunConfig `json:"-"`

	jaccards *sample[float64]
}

// Read reads the bundle r (named path) to its end and judges it afresh.
func Read(path string, r *traces.Reader) (*Run, error) {
	m := r.Manifest()
	run := &Run{Path: path, Label: filepath.Base(path), Manifest: m, Stats: sessions.NewRunStats(path),
		jaccards: newSample[float64](maxJaccards)}
	sched, ends := newSample[SchedPoint](maxPoints), newSample[SessionEnd](maxPoints)
	run.Stats.SetManifest(m.Tool, m.Created, m.Host, m.Config)
	warm := checksum.DefaultWarmupMaxSeqLen
	set := analyzers.NewSet(analyzers.Options{WarmupMaxSeqLen: warm})
	as := set.All()
	var kinds [256]uint64
	cov := analyzers.NewCoverageCollector()
	stepBS := map[uint64]int{}
	divSteps := map[uint64]bool{}
	emit := func(ev hook.Event) {
		if f, ok := ev.Body.(*hook.Finding); ok {
			run.finding(f)
			if f.Analyzer == graphdiff.AnalyzerName {
				if s, err := strconv.ParseUint(f.Evidence["step"], 10, 64); err == nil {
					divSteps[s] = true
				}
			}
		}
	}
	if m.Config.Engine != "" || m.Config.Sessions > 0 || m.Config.CUDAGraph != nil {
		for _, a := range as {
			a.Observe(hook.Event{Kind: hook.KindRunStart, Body: &hook.RunStart{Config: m.Config}}, emit)
		}
	}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		run.Events++
		kinds[ev.Kind]++
		if run.T0 == 0 || (ev.TS != 0 && ev.TS < run.T0) {
			run.T0 = ev.TS
		}
		run.Stats.Observe(ev)
		cov.Observe(ev)
		switch b := ev.Body.(type) {
		case *hook.Finding:
			continue // judged afresh below
		case *hook.RunStart:
			if run.Start == nil {
				c := b.Config
				run.Start = &c
			}
		case *hook.Replay:
			if len(stepBS) < maxSteps {
				bs := b.BatchSize
				if b.Mode == "graph" {
					bs = -bs - 1 // remember the mode in the sign
				}
				stepBS[b.Step] = bs
			}
		case *hook.Sched:
			sched.add(SchedPoint{ts: ev.TS, Running: b.RunningReq, Queued: b.QueueReq,
				TokenUsage: b.TokenUsage, Retract: b.Phase == "retract"})
			if b.Phase == "retract" {
				run.RetractObserved++
			} else {
				run.PeakRunning, run.PeakTokenUsage = max(run.PeakRunning, b.RunningReq), max(run.PeakTokenUsage, b.TokenUsage)
			}
		case *hook.Session:
			bad := outcome.IsCorrupted(b.Outcome)
			ends.add(SessionEnd{ts: ev.TS, ID: b.ID, Corrupted: bad})
			if bad {
				run.LeakTotal++
				if len(run.Leaks) < maxLeaks {
					run.Leaks = append(run.Leaks, Leak{Session: b.ID, Outcome: b.Outcome, Round: b.Round, Reason: b.Reason, Excerpt: b.Excerpt})
				}
			}
		}
		for _, a := range as {
			a.Observe(ev, emit)
		}
	}
	run.Sched, run.SchedSampled = sched.kept, sched.sampled()
	run.SessionEnds, run.SessionEndsSampled = ends.kept, ends.sampled()
	run.Jaccards, run.JaccardsSampled = run.jaccards.kept, run.jaccards.sampled()
	run.jaccards = nil
	run.Coverage = cov.Result()
	run.Truncated, run.TruncationReason, run.Skipped = r.Truncated(), r.TruncationReason(), r.Skipped()
	run.Stats.Truncated, run.Stats.Skipped = run.Truncated, run.Skipped
	run.Stats.TruncationReason = run.TruncationReason
	if f, ok := r.Footer(); ok {
		run.Stats.HaveFooter, run.Stats.FooterEvents, run.Stats.Dropped = true, f.Events, f.Dropped
	}
	if err := run.Stats.CheckSessionIDs(); err != nil {
		return nil, err
	}
	// A layer is measured when the bundle holds its events; otherwise its
	// summary stays nil.
	sums := set.Summaries()
	if kinds[hook.KindRoomChecksum] > 0 {
		run.Checksum = sums.Checksum
	}
	if kinds[hook.KindCanaryPages] > 0 {
		run.Canary = sums.Canary
	}
	if kinds[hook.KindGraphDiffSample] > 0 {
		run.GraphDiff = sums.Graphdiff
	}
	run.Summary = run.Stats.Summary()
	if n := run.Summary.Sessions; n > 0 {
		run.CILo, run.CIHi = outcome.Wilson(run.Summary.CorruptedSessions, n, outcome.Z95)
	}
	byBS := map[int]*BatchSteps{}
	for step, v := range stepBS {
		bs, graph := v, false
		if v < 0 {
			bs, graph = -v-1, true
		}
		b := byBS[bs]
		if b == nil {
			b = &BatchSteps{BS: bs}
			byBS[bs] = b
		}
		b.Steps++
		if graph {
			b.Graph++
		}
		if divSteps[step] {
			b.Divergent++
		}
	}
	for _, b := range byBS {
		run.Batches = append(run.Batches, *b)
	}
	sort.Slice(run.Batches, func(i, j int) bool { return run.Batches[i].BS < run.Batches[j].BS })
	for i := range run.Divergent {
		if v, ok := stepBS[run.Divergent[i].Step]; ok {
			run.Divergent[i].BS = max(v, -v-1)
		}
	}
	for i := range run.Sched {
		run.Sched[i].T = run.secs(run.Sched[i].ts)
	}
	for i := range run.SessionEnds {
		run.SessionEnds[i].T = run.secs(run.SessionEnds[i].ts)
	}
	return run, nil
}

func (run *Run) secs(ts int64) float64 {
	if run.T0 == 0 || ts == 0 {
		return 0
	}
	return float64(ts-run.T0) / 1e9
}

func (run *Run) finding(f *hook.Finding) {
	ev := f.Evidence
	switch {
	case f.Analyzer == checksum.AnalyzerName:
		run.MismatchTotal++
		if len(run.Mismatches) < maxEvidence {
			run.Mismatches = append(run.Mismatches, RoomMismatch{Room: ev["room"], Pages: ev["mismatch_pages"], Tokens: ev["mismatch_tokens"], Summary: f.Summary})
		}
	case f.Analyzer == canary.AnalyzerName && ev["class"] == canary.ClassLiveOverwrite.String():
		run.OverwriteTotal++
		if len(run.Overwrites) < maxEvidence {
			run.Overwrites = append(run.Overwrites, Overwrite{Step: ev["step"], Page: ev["page"], Victim: ev["victim"], Phase: ev["phase"]})
		}
	case f.Analyzer == graphdiff.AnalyzerName:
		run.DivergentTotal++
		j := -1.0
		if v, err := strconv.ParseFloat(ev["topk_jaccard"], 64); err == nil {
			j = v
			run.jaccards.add(v)
		}
		if len(run.Divergent) < maxEvidence {
			step, _ := strconv.ParseUint(ev["step"], 10, 64)
			run.Divergent = append(run.Divergent, Divergence{Step: step, Request: ev["request"], Session: ev["session"], Jaccard: j, Summary: f.Summary})
		}
	}
}
