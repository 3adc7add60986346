package sessions

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/internal/safetext"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/spec/runconfig"
)

// SchedStats are the scheduler facts of a run, from its sched events. Its
// JSON form matches the "sched" section of `sim run --json`.
type SchedStats struct {
	Observations     int     `json:"observations"`      // sched events seen
	PeakRunningReq   int     `json:"peak_running_req"`  // over batch observations
	PeakTokenUsage   float64 `json:"peak_token_usage"`  // fraction of the KV pool
	Retractions      int     `json:"retractions"`       // requests retracted: sum of Retracted on phase "retract"
	RetractionEvents int     `json:"retraction_events"` // phase "retract" observations
	DecodeBatches    int     `json:"decode_batches"`
}

// RunStats accumulates what A/B and the reports need to know about one run:
// its configuration and host (from the bundle manifest or the run.start
// event), session outcomes, scheduler pressure, GPU facts and timing. Feed it
// events with Observe (or use it as a hook.Publisher). Not safe for
// concurrent use.
type RunStats struct {
	Name string // the bundle path or a label, for reports

	Tool         string
	Created      time.Time
	Host         hook.HostInfo
	Config       hook.RunConfig
	HaveManifest bool // SetManifest was called or a run.start event was seen
	// Contradictions are the settings the engine's own reports (run.start
	// events of engine processes) contradicted; Config uses the engine's
	// value (runconfig.EngineMerge).
	Contradictions []runconfig.Contradiction
	engine         runconfig.EngineMerge

	Outcomes         outcome.Counts
	UnknownOutcomes  int // session events with a class this build does not know
	MaxSessionRounds int // the most rounds any session ran
	Deviated         int // sessions the twin marked as having left the script
	Loops            int // sessions with an n-gram loop
	// DuplicateSessions counts session events whose id the run already
	// had; they are not counted again (FirstDuplicate names one). See
	// CheckSessionIDs.
	DuplicateSessions int
	FirstDuplicate    string
	sessionIDs        map[sessionKey]struct{}

	Sched      SchedStats
	GPUDevices int // most devices in one gpu telemetry sample

	Events      int64
	FirstTS     int64
	LastTS      int64
	WallNS      int64 // from run.end; 0 when the run has none
	EndError    string
	Truncated   bool   // the bundle was cut short (set by the bundle reader)
	Skipped     uint64 // damaged records the bundle reader skipped
	haveRunEnd  bool
	startConfig bool // Config came from a run.start event

	// TruncationReason says where a truncated bundle was cut (set by the
	// bundle reader; "" when unknown).
	TruncationReason string
	// FooterEvents is the event count the bundle's footer states, Dropped
	// the events it says were lost before reaching the writer; HaveFooter
	// says there was a footer (set by the bundle reader).
	FooterEvents uint64
	Dropped      uint64
	HaveFooter   bool
}

// NewRunStats returns an empty accumulator labelled name.
func NewRunStats(name string) *RunStats { return &RunStats{Name: name} }

// SetManifest records the bundle manifest's facts (tool, creation time, host,
// run configuration).
func (r *RunStats) SetManifest(tool string, created time.Time, host hook.HostInfo, cfg hook.RunConfig) {
	r.Tool, r.Created, r.Host, r.Config = tool, created, host, cfg
	r.HaveManifest = true
}

// Publish makes RunStats a hook.Publisher; it is Observe.
func (r *RunStats) Publish(ev hook.Event) { r.Observe(ev) }

// Partial says why the run's counts may miss sessions, one reason per line
// (nil when the bundle was read whole): damaged records skipped, events the
// footer counts that were not readable, a cut-off bundle, events dropped
// before the writer. Unknown is not clean: a session in a lost event is a
// session nobody counted.
func (r *RunStats) Partial() []string {
	var out []string
	read := uint64(max(r.Events, 0))
	switch {
	case r.HaveFooter && r.FooterEvents > read:
		what := fmt.Sprintf("the footer counts %d events, %d were readable: %d events unreadable", r.FooterEvents, read, r.FooterEvents-read)
		if r.Skipped > 0 {
			what += fmt.Sprintf(" (%d damaged records skipped)", r.Skipped)
		}
		out = append(out, what+"; sessions may be missing")
	case r.Skipped > 0:
		out = append(out, fmt.Sprintf("%d damaged records skipped, events in them unreadable (number unknown); sessions may be missing", r.Skipped))
	}
	if r.Truncated {
		why := "the bundle is truncated"
		if r.TruncationReason != "" {
			why += " (" + r.TruncationReason + ")"
		}
		out = append(out, why+": events after the cut were not recorded or are unreadable; sessions may be missing")
	}
	if r.Dropped > 0 {
		out = append(out, fmt.Sprintf("the footer says %d events were dropped before reaching the writer; sessions may be missing", r.Dropped))
	}
	return out
}

// Observe folds one event into the statistics. Kinds it does not use are
// counted in Events and otherwise ignored.
func (r *RunStats) Observe(ev hook.Event) {
	r.Events++
	if ev.TS != 0 {
		if r.FirstTS == 0 || ev.TS < r.FirstTS {
			r.FirstTS = ev.TS
		}
		r.LastTS = max(r.LastTS, ev.TS)
	}
	switch b := ev.Body.(type) {
	case *hook.RunStart:
		// The producer's own account fills what the manifest left empty
		// (a collector's manifest knows nothing of the engine's flags).
		if isZeroConfig(r.Config) {
			r.Config, r.startConfig = b.Config, true
			if EngineReport(b.Config) {
				r.engine.Merge(&hook.RunConfig{}, b.Config, ev.Src.Role, "") // remember whose settings these are
			}
		} else if EngineReport(b.Config) {
			// An engine process's settings, read inside it: they fill and
			// check what the manifest (a wrapper's statement) says.
			r.Contradictions = append(r.Contradictions, r.engine.Merge(&r.Config, b.Config, ev.Src.Role, Reporter(ev.Src, b))...)
		}
		if r.Tool == "" {
			r.Tool = b.Tool
		}
		if isZeroHost(r.Host) {
			r.Host = b.Host
		}
		r.HaveManifest = true
	case *hook.RunEnd:
		r.WallNS, r.EndError, r.haveRunEnd = b.WallNS, b.Error, true
	case *hook.Session:
		if b.ID != "" {
			// Keyed by producer too: two harnesses feeding one collector
			// may each number their sessions from s000.
			k := sessionKey{ev.Src, b.ID}
			if _, dup := r.sessionIDs[k]; dup {
				if r.DuplicateSessions == 0 {
					r.FirstDuplicate = b.ID
				}
				r.DuplicateSessions++
				break
			}
			if r.sessionIDs == nil {
				r.sessionIDs = map[sessionKey]struct{}{}
			}
			r.sessionIDs[k] = struct{}{}
		}
		if !r.Outcomes.Add(b.Outcome) {
			r.UnknownOutcomes++
		}
		r.MaxSessionRounds = max(r.MaxSessionRounds, b.Rounds)
		if b.Deviated {
			r.Deviated++
		}
		if b.Loop {
			r.Loops++
		}
	case *hook.Sched:
		s := &r.Sched
		s.Observations++
		if b.Phase == "retract" {
			s.RetractionEvents++
			s.Retractions += max(b.Retracted, 0)
			break
		}
		if b.Phase == "decode" {
			s.DecodeBatches++
		}
		s.PeakRunningReq = max(s.PeakRunningReq, b.RunningReq)
		s.PeakTokenUsage = max(s.PeakTokenUsage, b.TokenUsage)
	case *hook.GPU:
		r.GPUDevices = max(r.GPUDevices, len(b.Devices))
	}
}

// EngineReport reports whether a run.start's configuration is an engine
// process's report about itself: some value has provenance "engine".
func EngineReport(c hook.RunConfig) bool {
	for _, p := range c.Provenance {
		if p == hook.ProvEngine {
			return true
		}
	}
	return false
}

// Reporter names the engine process of a run.start: "decode rank 1",
// "rank 0", else its process and pid.
func Reporter(src hook.Source, b *hook.RunStart) string {
	switch {
	case src.Role != "":
		return fmt.Sprintf("%s rank %d", src.Role, src.Rank)
	case b != nil && b.TPRank != nil:
		return fmt.Sprintf("rank %d", *b.TPRank)
	case src.PID != 0:
		return fmt.Sprintf("%s pid %d", src.Proc, src.PID)
	}
	return src.Proc
}

// sessionKey is a session of one producer.
type sessionKey struct {
	src hook.Source
	id  string
}

// CheckSessionIDs refuses a run that holds a session id twice: one run's
// sessions are distinct, so a repeat means its events were doubled (a
// bundle merged with itself or a copy of it), and every rate and interval
// computed from it would be false.
func (r *RunStats) CheckSessionIDs() error {
	if r.DuplicateSessions == 0 {
		return nil
	}
	return fmt.Errorf("%s: %d session events repeat an id their producer already used (first %s): one run's sessions are distinct, so its events were doubled (a bundle merged with itself or with a copy?); refusing to count them",
		safetext.Quote(r.Name), r.DuplicateSessions, safetext.Quote(r.FirstDuplicate))
}

func isZeroConfig(c hook.RunConfig) bool { return reflect.DeepEqual(c, hook.RunConfig{}) }
func isZeroHost(h hook.HostInfo) bool    { return reflect.DeepEqual(h, hook.HostInfo{}) }

// Rounds is the configured rounds per session, or, when the configuration
// does not say, the most rounds any session ran.
func (r *RunStats) Rounds() int {
	if r.Config.Rounds > 0 {
		return r.Config.Rounds
	}
	return r.MaxSessionRounds
}

// Wall is the run's wall time: run.end's when present, else the span of the
// event timestamps.
func (r *RunStats) Wall() time.Duration {
	if r.haveRunEnd && r.WallNS > 0 {
		return time.Duration(r.WallNS)
	}
	if r.LastTS > r.FirstTS {
		return time.Duration(r.LastTS - r.FirstTS)
	}
	return 0
}

// Summary is the run's Summary.
func (r *RunStats) Summary() outcome.Summary {
	return outcome.SummaryOf(r.Outcomes, r.Rounds(), r.Wall())
}

// GPUCount is the number of GPUs the host reported, or else the most devices
// seen in one telemetry sample; 0 when unknown.
func (r *RunStats) GPUCount() int {
	if n := len(r.Host.GPUs); n > 0 {
		return n
	}
	return r.GPUDevices
}

// GPUModels is the host's distinct GPU names joined with "+", sorted; empty
// when unknown.
func (r *RunStats) GPUModels() string {
	seen := map[string]bool{}
	var names []string
	for _, g := range r.Host.GPUs {
		if g.Name != "" && !seen[g.Name] {
			seen[g.Name] = true
			names = append(names, g.Name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, "+")
}

// EventSource yields events until io.EOF; a traces.Reader is one.
type EventSource interface {
	Next() (hook.Event, error)
}

// ReadRun feeds every event of src into r. It returns nil at io.EOF and any
// other error from src, with r holding everything read before it.
func ReadRun(src EventSource, r *RunStats) error {
	for {
		ev, err := src.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		r.Observe(ev)
	}
}
