package report

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/sessions"
)

// Report is the whole account: the runs (the first is the subject, the
// others its A/B arms) and what follows from them.
type Report struct {
	Runs []*Run     `json:"runs"`
	AB   []ABResult `json:"ab"`
	// BundlesGone, when set, says the bundles were removed after the
	// report was written (a temporary directory) and how to keep them next
	// time; the re-check section shows it instead of commands naming files
	// that no longer exist. The caller that removes them sets it.
	BundlesGone string `json:"bundles_gone,omitempty"`
}

// ABResult compares one run against the first.
type ABResult struct {
	A, B   *Run
	Report sessions.ABReport
}

// Build puts runs together; runs[0] is the subject.
func Build(runs []*Run) *Report {
	rep := &Report{Runs: runs}
	for _, r := range runs[1:] {
		rep.AB = append(rep.AB, ABResult{A: runs[0], B: r, Report: sessions.Compare(runs[0].Stats, r.Stats, sessions.CompareOptions{Comparisons: len(runs) - 1})})
	}
	return rep
}

// Layer states.
const (
	StateClean       = "clean"
	StateFault       = "fault"
	StateNotMeasured = "not measured"
	// StatePartial: nothing found in what was observed, but not everything
	// was observed (rooms seen on one side only, evidence the producers
	// reported lost): neither clean nor a fault.
	StatePartial = "partial"
)

// Verdict is one layer's binary test.
type Verdict struct {
	Layer string // "transfer", "buffer", "compute"
	Title string
	State string
	Text  string
}

// roomsMatch is checksum compare's count of rooms: "278/279 rooms match;
// 1 warmup".
func roomsMatch(matched, rooms, warmup int) string {
	s := fmt.Sprintf("%d/%d rooms match", matched, rooms)
	if warmup > 0 {
		s += fmt.Sprintf("; %d warmup", warmup)
	}
	return s
}

// Verdicts are the three layers' verdicts for the run. A layer with no
// fault is clean only when it was observed whole: rooms seen on one side
// only, or evidence the producers reported lost in their run.end events
// (Coverage.Partial), make it partial, with the reason in its text.
func (r *Run) Verdicts() []Verdict {
	tr := Verdict{Layer: "transfer", Title: "Transfer: per-room index-K checksums, prefill vs decode", State: StateNotMeasured,
		Text: "not measured: the bundle holds no room.checksum events"}
	if c := r.Checksum; c != nil {
		oneSide := ""
		if c.Missing > 0 {
			oneSide = fmt.Sprintf("%d of %d rooms seen on one side only (not compared)", c.Missing, c.Rooms)
		}
		switch {
		case c.Mismatched > 0:
			tr.State, tr.Text = StateFault, fmt.Sprintf("transfer DIRTY: %d of %d rooms mismatch", c.Mismatched, c.Rooms)
			if oneSide != "" {
				tr.Text += "; " + oneSide
			}
		case c.Matched == 0 && oneSide != "":
			tr.Text = "not measured: " + oneSide
		case c.Matched == 0:
			tr.Text = fmt.Sprintf("not measured: %d rooms, none past warmup", c.Rooms)
		case oneSide != "":
			tr.State, tr.Text = StatePartial, "transfer partial: "+roomsMatch(c.Matched, c.Rooms, c.Warmup)+"; "+oneSide
		default:
			tr.State, tr.Text = StateClean, "transfer clean: "+roomsMatch(c.Matched, c.Rooms, c.Warmup)
		}
	}
	r.partial(&tr, checksum.AnalyzerName)
	bu := Verdict{Layer: "buffer", Title: "Persistent buffer: canary around every graph replay", State: StateNotMeasured,
		Text: "not measured: the bundle holds no canary.pages events"}
	if c := r.Canary; c != nil && c.Replays > 0 {
		if n := c.AllLiveOverwrites(); n > 0 {
			bu.State, bu.Text = StateFault, fmt.Sprintf("buffer OVERWRITTEN: %d live-page overwrites in %d replays", n, c.Replays)
		} else {
			bu.State, bu.Text = StateClean, fmt.Sprintf("buffer pristine: 0 live-page overwrites in %d replays", c.Replays)
		}
	}
	r.partial(&bu, canary.AnalyzerName)
	co := Verdict{Layer: "compute", Title: "Transient compute: graph replay vs eager on the same inputs", State: StateNotMeasured,
		Text: "not measured: the bundle holds no graphdiff.sample events"}
	if g := r.GraphDiff; g != nil && g.Samples > 0 {
		if g.Divergent > 0 {
			co.State, co.Text = StateFault, fmt.Sprintf("graph ≠ eager: %d of %d samples diverge in %d sessions, %d of which leaked",
				g.Divergent, g.Samples, g.DivergentSessions, g.DivergentSessionsLeaked)
		} else {
			co.State, co.Text = StateClean, fmt.Sprintf("graph = eager: 0 of %d samples diverge", g.Samples)
		}
	}
	r.partial(&co, graphdiff.AnalyzerName)
	return []Verdict{tr, bu, co}
}

// partial turns a clean verdict into a partial one when the producers
// reported lost evidence bearing on analyzer's layer, and says what; a
// fault or an unmeasured layer stays what it is, a partial one gets the
// reason beside its own.
func (r *Run) partial(v *Verdict, analyzer string) {
	why := r.Coverage.Partial(analyzer)
	if why == "" {
		return
	}
	switch v.State {
	case StateClean:
		v.State = StatePartial
		v.Text = v.Layer + " partial: " + strings.TrimPrefix(strings.TrimPrefix(v.Text, v.Layer+" clean: "), v.Layer+" pristine: ") + "; " + why
	case StatePartial:
		v.Text += "; " + why
	}
}

// Headline is the run's corruption rate with its 95% interval, or why there
// is none.
// When the bundle lost events (damaged records skipped, events its footer
// counts but that were unreadable, a cut-off bundle), sessions may be
// missing from the rate: the headline says so after "PARTIAL:".
func (r *Run) Headline() string {
	s := r.Summary
	h := "corruption rate unknown: the bundle holds no session events"
	if s.Sessions > 0 {
		h = fmt.Sprintf("%d of %d sessions corrupted = %.1f%% (95%% CI %.1f%%–%.1f%%; leak %d, no_tool %d, error %d)",
			s.CorruptedSessions, s.Sessions, 100*s.CorruptionRate, 100*r.CILo, 100*r.CIHi, s.Outcomes.Leak, s.Outcomes.NoTool, s.Outcomes.Error)
	}
	if r.Stats != nil {
		if lost := r.Stats.Partial(); len(lost) > 0 {
			h += "; PARTIAL: " + strings.Join(lost, "; ")
		}
	}
	return h
}

// Setting is one run setting and where it came from.
type Setting struct {
	Name, Value, Provenance string
}

// Settings lists the run's configuration: engine flags (unknown when not
// reported) with their provenance, then the workload.
func (r *Run) Settings() []Setting {
	c := r.Manifest.Config
	if s := r.Start; s != nil {
		if c.Engine == "" {
			c = *s // a collector's manifest: the producer's run.start knows
		}
		for _, f := range []struct {
			dst *string
			src string
		}{{&c.Model, s.Model}, {&c.ToolTime, s.ToolTime}, {&c.StepTime, s.StepTime}} {
			if *f.dst == "" {
				*f.dst = f.src
			}
		}
	}
	prov := func(name string) string {
		if p := c.Provenance[name]; p != "" {
			return p
		}
		return "—"
	}
	str := func(v string) string {
		if v == "" {
			return "unknown"
		}
		return v
	}
	num := func(v int) string {
		if v == 0 {
			return "unknown"
		}
		return strconv.Itoa(v)
	}
	boolean := func(v *bool) string {
		if v == nil {
			return "unknown"
		}
		return strconv.FormatBool(*v)
	}
	out := []Setting{
		{"engine", str(c.Engine), "manifest"},
		{"model", str(c.Model), "manifest"},
		{"index_k_dtype", str(c.IndexKDtype), prov("index_k_dtype")},
		{"cuda_graph", boolean(c.CUDAGraph), prov("cuda_graph")},
		{"cuda_graph_max_bs", num(c.CUDAGraphMaxBS), prov("cuda_graph_max_bs")},
		{"multi_stream_overlap", boolean(c.MultiStreamOverlap), prov("multi_stream_overlap")},
		{"disaggregation", str(c.Disaggregation), prov("disaggregation")},
		{"max_running_requests", num(c.MaxRunningRequests), prov("max_running_requests")},
		{"pool_tokens", num(c.PoolTokens), prov("pool_tokens")},
	}
	inject := "none"
	if len(c.Inject) > 0 {
		inject = strings.Join(c.Inject, ",")
	}
	out = append(out, Setting{"inject", inject, prov("inject")})
	for _, k := range slices.Sorted(maps.Keys(c.Extra)) {
		out = append(out, Setting{"extra." + k, c.Extra[k], prov("extra." + k)})
	}
	for _, k := range slices.Sorted(maps.Keys(c.ServerArgs)) {
		out = append(out, Setting{"server." + k, c.ServerArgs[k], hook.ProvServer})
	}
	out = append(out,
		Setting{"sessions", num(c.Sessions), "workload"},
		Setting{"rounds", num(c.Rounds), "workload"},
		Setting{"concurrency", num(c.Concurrency), "workload"},
		Setting{"seed", strconv.FormatUint(c.Seed, 10), "workload"},
		Setting{"tool_time", str(c.ToolTime), "workload"},
		Setting{"step_time", str(c.StepTime), "workload"},
		Setting{"tool", str(r.Manifest.Tool), "manifest"},
		Setting{"command", str(r.Manifest.Command), "manifest"},
	)
	return out
}

// Commands are the exact commands that re-check the report's claims, or
// none when the bundles are gone (BundlesGone).
func (rep *Report) Commands() []string {
	if rep.BundlesGone != "" {
		return nil
	}
	var out []string
	base := rep.Runs[0]
	for _, r := range rep.Runs {
		p := ShellQuote(r.Path)
		if r.Checksum != nil {
			out = append(out, "kvcanary checksum compare "+p)
		}
		if r.Canary != nil {
			out = append(out, "kvcanary canary report "+p)
		}
		if r.GraphDiff != nil {
			out = append(out, "kvcanary graphdiff report "+p)
		}
		if r != base {
			out = append(out, "kvcanary ab "+ShellQuote(base.Path)+" "+p)
		}
	}
	out = append(out, "kvcanary trace export --format perfetto "+ShellQuote(base.Path)+" -o timeline.json")
	all := make([]string, len(rep.Runs))
	for i, r := range rep.Runs {
		all[i] = ShellQuote(r.Path)
	}
	out = append(out, "kvcanary report "+strings.Join(all, " ")+" -o report.html")
	return out
}

// ShellQuote quotes s for a POSIX shell when it needs quoting.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Visible makes quoted text safe to show as data: control characters
// (ANSI escapes included) become \xNN, invalid UTF-8 becomes U+FFFD;
// newlines and tabs stay. Markup is left to the output's own escaping.
func Visible(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune('\uFFFD')
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case r == '\u2028' || r == '\u2029' || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069'):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// pct formats a fraction as a percentage.
func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }
