package sessions

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/kvcanary/kvcanary/internal/safetext"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/spec/runconfig"
)

// Significance is the level at which Compare's verdict calls a difference
// significant.
const Significance = 0.05

// ClassRate is the count and rate of one outcome class in a run.
type ClassRate struct {
	Count    int        `json:"count"`
	Rate     float64    `json:"rate"`
	Wilson95 [2]float64 `json:"wilson95"`
}

// Arm is one side of an A/B comparison: the run's Summary (its keys at the
// top level) plus per-class rates and the facts confounds are computed from.
type Arm struct {
	outcome.Summary
	Name      string               `json:"name"`
	Rates     map[string]ClassRate `json:"rates"` // by outcome class, plus "corrupted"
	Sched     SchedStats           `json:"sched"`
	Config    hook.RunConfig       `json:"config"`
	Tool      string               `json:"tool,omitempty"`
	Host      string               `json:"host,omitempty"`
	GPUCount  int                  `json:"gpu_count"`
	GPUModel  string               `json:"gpu_model,omitempty"`
	Truncated bool                 `json:"truncated,omitempty"`
	// Contradictions are settings the run's statement (a label) and its
	// engine, or two of its engine processes, gave different values for;
	// Config holds the value each one used.
	Contradictions []runconfig.Contradiction `json:"contradictions,omitempty"`
}

// ABReport is the result of comparing two runs; its JSON form is the
// `kvcanary ab --json` contract.
type ABReport struct {
	A       Arm     `json:"a"`
	B       Arm     `json:"b"`
	FisherP float64 `json:"fisher_p"` // two-sided, corrupted vs not corrupted
	// Level is what FisherP is judged at: Significance over the number of
	// comparisons the caller makes at once (CompareOptions.Comparisons).
	Level          float64    `json:"level"`
	DifferingFlags []FlagDiff `json:"differing_flags"`
	FlagUnderTest  *FlagDiff  `json:"flag_under_test,omitempty"`
	Confounds      []Confound `json:"confounds"`
	Notes          []string   `json:"notes"` // correlation caveats and data-quality remarks
	Verdict        string     `json:"verdict"`
	// Status is StatusNoData when a run has no session outcomes (no
	// verdict), StatusPartial when a run's bundle lost events, so sessions
	// may be missing from its counts (the verdict covers what was
	// readable), "" when both runs were read whole.
	Status string `json:"status,omitempty"`
	// Partial names, per run, what its bundle lost (Status partial).
	Partial []string `json:"partial,omitempty"`
	// Message is the no-data sentence (Status no-data).
	Message string `json:"message,omitempty"`
}

// ABReport.Status values.
const (
	StatusPartial = "partial"
	StatusNoData  = "no-data"
)

// CompareOptions tune Compare.
type CompareOptions struct {
	// Flag names the engine flag under test (an EngineFlagDiffs name). Empty:
	// inferred when exactly one engine flag differs.
	Flag string
	// Comparisons is how many A/B comparisons this one is judged with, one
	// family (0 or 1: alone). The verdict's level is Significance over it
	// (Bonferroni): a report or demo that compares a baseline with four
	// runs at 0.05 each finds a difference that is not there 19% of the time.
	Comparisons int
}

// Compare builds the A/B report of two runs.
func Compare(a, b *RunStats, opts CompareOptions) ABReport {
	r := ABReport{A: abArmOf(a), B: abArmOf(b), Notes: []string{}, Level: Significance / float64(max(opts.Comparisons, 1))}
	sa, sb := r.A.Summary, r.B.Summary
	r.FisherP = FisherExact(sa.CorruptedSessions, sa.Sessions-sa.CorruptedSessions,
		sb.CorruptedSessions, sb.Sessions-sb.CorruptedSessions)
	r.DifferingFlags, r.FlagUnderTest, r.Confounds = Confounds(a, b, opts.Flag)
	if r.DifferingFlags == nil {
		r.DifferingFlags = []FlagDiff{}
	}
	if r.Confounds == nil {
		r.Confounds = []Confound{}
	}
	r.Notes = append(r.Notes, abNotes(a, b, opts.Flag, r.DifferingFlags)...)
	var lost []string
	for _, x := range []struct {
		label string
		r     *RunStats
	}{{"A", a}, {"B", b}} {
		p := x.r.Partial()
		for _, why := range p {
			r.Partial = append(r.Partial, fmt.Sprintf("run %s (%s): %s", x.label, safetext.Quote(x.r.Name), why))
		}
		if len(p) > 0 {
			lost = append(lost, x.label)
		}
	}
	r.Verdict = abVerdict(r)
	switch {
	case r.A.Sessions == 0 || r.B.Sessions == 0:
		r.Status, r.Message = StatusNoData, r.Verdict
	case len(lost) > 0:
		r.Status = StatusPartial
		r.Verdict += fmt.Sprintf("; PARTIAL: run %s lost events, sessions may be missing from its counts", strings.Join(lost, " and "))
	}
	return r
}

func abArmOf(r *RunStats) Arm {
	s := r.Summary()
	arm := Arm{
		Summary: s, Name: r.Name, Rates: map[string]ClassRate{}, Sched: r.Sched, Config: r.Config,
		Tool: r.Tool, Host: r.Host.Hostname, GPUCount: r.GPUCount(), GPUModel: r.GPUModels(), Truncated: r.Truncated,
		Contradictions: r.Contradictions,
	}
	for _, c := range outcome.Classes() {
		arm.Rates[string(c)] = abClassRate(s.Outcomes.Get(string(c)), s.Sessions)
	}
	arm.Rates["corrupted"] = abClassRate(s.CorruptedSessions, s.Sessions)
	return arm
}

func abClassRate(k, n int) ClassRate {
	cr := ClassRate{Count: k}
	if n > 0 {
		cr.Rate = float64(k) / float64(n)
	}
	cr.Wilson95[0], cr.Wilson95[1] = outcome.Wilson(k, n, outcome.Z95)
	return cr
}

// notes are the honest remarks about what the comparison can and cannot show.
func abNotes(a, b *RunStats, flag string, diffs []FlagDiff) []string {
	var out []string
	for _, x := range []struct {
		label string
		r     *RunStats
	}{{"A", a}, {"B", b}} {
		r, s := x.r, x.r.Summary()
		for _, c := range r.Contradictions {
			out = append(out, fmt.Sprintf("run %s: contradiction: %s", x.label, safetext.Quote(c.String())))
		}
		if s.Sessions == 0 {
			out = append(out, fmt.Sprintf("run %s has no session outcomes: there is nothing to compare", x.label))
			continue
		}
		if r.Sched.Retractions > 0 && s.CorruptedSessions == 0 {
			out = append(out, fmt.Sprintf("retractions occurred in a run with no corruption (run %s: %d requests retracted, 0/%d sessions corrupted): not causal evidence",
				x.label, r.Sched.Retractions, s.Sessions))
		}
		if r.Sched.Observations > 0 && r.Sched.Retractions == 0 && s.CorruptedSessions > 0 {
			out = append(out, fmt.Sprintf("run %s corrupted %d/%d sessions without a single retraction: retraction cannot be what causes it there",
				x.label, s.CorruptedSessions, s.Sessions))
		}
		if s.Outcomes.Error > 0 {
			out = append(out, fmt.Sprintf("run %s has %d error sessions, which count as corrupted: check they are not infrastructure failures (dead server, timeouts at the proxy)",
				x.label, s.Outcomes.Error))
		}
		if r.UnknownOutcomes > 0 {
			out = append(out, fmt.Sprintf("run %s has %d sessions with an outcome class this build does not know; they are not counted", x.label, r.UnknownOutcomes))
		}
		if r.Truncated {
			out = append(out, fmt.Sprintf("run %s's bundle is truncated: its counts cover what was recorded", x.label))
		}
	}
	switch {
	case len(diffs) == 0:
		out = append(out, "no engine flag differs between the runs: this compares two runs of one configuration (a repeat, or a change recorded nowhere)")
	case flag != "" && !abHasFlag(diffs, flag) && !abHasFlag(UnknownFlagDiffs(a.Config, b.Config), flag) &&
		(runconfig.SettingText(a.Config, flag) != "" || a.Config.Engine == "sim"):
		out = append(out, fmt.Sprintf("the flag under test %q has the same value in both runs", flag))
	}
	out = append(out, unknownNotes(a.Config, b.Config, flag)...)
	return out
}

// unknownNotes say which engine settings a comparison could not use because
// a run does not know them.
func unknownNotes(a, b hook.RunConfig, flag string) []string {
	var out []string
	for _, u := range UnknownFlagDiffs(a, b) {
		known, unknown, v := "A", "B", u.A
		if u.A == nil {
			known, unknown, v = "B", "A", u.B
		}
		out = append(out, fmt.Sprintf("%s is %s in run %s (%s) but unknown in run %s: not compared",
			safetext.Quote(u.Name), abValue(v), known, provText(pick(known == "A", a, b), u.Name), unknown))
	}
	var both []string
	ua, ub := runconfig.UnknownSettings(a), runconfig.UnknownSettings(b)
	for _, n := range ua {
		if slices.Contains(ub, n) {
			both = append(both, n)
		}
	}
	if len(both) > 0 {
		out = append(out, fmt.Sprintf("%s unknown in both runs: a change there cannot be seen (record against a server that reports its settings, or state them with repro --label KEY=VALUE)",
			strings.Join(both, ", ")))
	}
	if flag != "" && runconfig.SettingText(a, flag) == "" && runconfig.SettingText(b, flag) == "" && a.Engine != "sim" && b.Engine != "sim" {
		out = append(out, fmt.Sprintf("the flag under test %q is unknown in both runs", flag))
	}
	return out
}

func pick(first bool, a, b hook.RunConfig) hook.RunConfig {
	if first {
		return a
	}
	return b
}

// provText names where a setting came from: "reported by the server",
// "labelled", "the twin's", or "source not recorded".
func provText(rc hook.RunConfig, name string) string {
	switch rc.Provenance[name] {
	case hook.ProvServer:
		return "reported by the server"
	case hook.ProvLabel:
		return "labelled"
	case hook.ProvTwin:
		return "the twin's setting"
	case hook.ProvEngine:
		return "reported by the engine"
	}
	if strings.HasPrefix(name, "server.") {
		return "reported by the server"
	}
	return "source not recorded"
}

func abHasFlag(diffs []FlagDiff, name string) bool {
	for _, d := range diffs {
		if d.Name == name {
			return true
		}
	}
	return false
}

func abVerdict(r ABReport) string {
	sa, sb := r.A.Summary, r.B.Summary
	if sa.Sessions == 0 || sb.Sessions == 0 {
		return "no verdict: a run has no session outcomes"
	}
	rates := fmt.Sprintf("%d/%d vs %d/%d corrupted, Fisher p = %s", sa.CorruptedSessions, sa.Sessions, sb.CorruptedSessions, sb.Sessions, FormatP(r.FisherP))
	if r.Level < Significance {
		rates += fmt.Sprintf(" against %s, %g shared by the comparisons", FormatP(r.Level), Significance)
	}
	var head string
	switch {
	case r.FisherP >= r.Level:
		head = "no significant difference"
	case sa.CorruptionRate > sb.CorruptionRate:
		head = "B corrupts significantly less than A"
	default:
		head = "A corrupts significantly less than B"
	}
	tail := ""
	switch n := len(r.Confounds); {
	case n == 0:
		tail = "; no confounds found"
	case n == 1:
		tail = "; 1 confound to rule out before crediting a flag"
	default:
		tail = fmt.Sprintf("; %d confounds to rule out before crediting a flag", n)
	}
	return head + " (" + rates + ")" + tail
}

// FormatP prints a p-value with three significant digits ("0.486",
// "0.000568", "1.08e-05").
func FormatP(p float64) string {
	switch {
	case p != p:
		return "NaN"
	case p >= 1e-4 || p == 0:
		return strconv.FormatFloat(p, 'g', 3, 64)
	default:
		return strconv.FormatFloat(p, 'e', 2, 64)
	}
}

// WriteText prints the report for people: the two headlines, a per-class
// table, the test, the flag under test, confounds, notes and the verdict.
func (r ABReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "A  %s\n   %s\n", safetext.Quote(r.A.Name), r.A.Headline())
	fmt.Fprintf(&b, "B  %s\n   %s\n\n", safetext.Quote(r.B.Name), r.B.Headline())
	fmt.Fprintf(&b, "%-10s  %-28s  %-28s\n", "class", "A", "B")
	for _, c := range append(append([]string(nil), hook.Outcomes...), "corrupted") {
		fmt.Fprintf(&b, "%-10s  %-28s  %-28s\n", c, abRateCell(r.A.Rates[c]), abRateCell(r.B.Rates[c]))
	}
	fmt.Fprintf(&b, "\nFisher exact test, two-sided, corrupted vs not: p = %s\n", FormatP(r.FisherP))
	switch {
	case r.FlagUnderTest != nil:
		n := r.FlagUnderTest.Name
		pa, pb := provText(r.A.Config, n), provText(r.B.Config, n)
		src := pa
		if pa != pb {
			src = "A " + pa + ", B " + pb
		}
		fmt.Fprintf(&b, "flag under test: %s  %s -> %s  (%s)\n", safetext.Quote(n), abValue(r.FlagUnderTest.A), abValue(r.FlagUnderTest.B), src)
	case len(r.DifferingFlags) > 0:
		names := make([]string, len(r.DifferingFlags))
		for i, d := range r.DifferingFlags {
			names[i] = safetext.Quote(d.Name) // extra.<key> comes from the bundle
		}
		fmt.Fprintf(&b, "engine flags that differ: %s (none named as under test)\n", strings.Join(names, ", "))
	}
	if len(r.Confounds) == 0 {
		b.WriteString("confounds: none found\n")
	} else {
		fmt.Fprintf(&b, "confounds (%d):\n", len(r.Confounds))
		for _, c := range r.Confounds {
			fmt.Fprintf(&b, "  %-20s %s -> %s\n      %s\n", safetext.Quote(c.Name), abValue(c.A), abValue(c.B), c.Note)
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("notes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	fmt.Fprintf(&b, "verdict: %s\n", r.Verdict)
	if len(r.Partial) > 0 {
		b.WriteString("PARTIAL: the verdict above covers only the events that were readable; sessions may be missing:\n")
		for _, p := range r.Partial {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func abRateCell(c ClassRate) string {
	return fmt.Sprintf("%d (%.1f%%, %.1f-%.1f%%)", c.Count, 100*c.Rate, 100*c.Wilson95[0], 100*c.Wilson95[1])
}

func abValue(v any) string {
	switch x := v.(type) {
	case string:
		if x == "" {
			return `""`
		}
		return safetext.Quote(x)
	case float64:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
	return fmt.Sprint(v)
}
