package demo

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// Verdict is the investigation's conclusion.
type Verdict struct {
	// Layer is where the decisive tests put the fault: "transfer",
	// "persistent-buffer", "transient-compute", or "" when they do not.
	Layer string `json:"layer"`
	// Cause names the mechanism (a Mech* name) or the layer's fault
	// ("pd-transfer", "live-page-overwrite"); "" when the evidence does not
	// single one out.
	Cause   string   `json:"cause"`
	Text    string   `json:"text"` // short sentences on one line (a dashboard wraps it)
	Reasons []string `json:"reasons"`

	lines []string // Text in lines, for Lines
}

// Lines is Text for plain output: one sentence or workaround a line.
func (v Verdict) Lines() []string {
	if len(v.lines) == 0 {
		return []string{v.Text}
	}
	return v.lines
}

var mechNames = map[string]string{
	MechCUDAGraph:     "CUDA graph capture",
	MechGraphPlanner:  "the graph memory planner",
	MechOverlap:       "multi-stream overlap",
	MechBF16IndexK:    "bf16 index-K",
	MechInGraphLogits: "index logits in the graph arena",
	MechEagerFallback: "eager fallback above cuda-graph-max-bs",
}

// MechanismName is a mechanism's name for people.
func MechanismName(m string) string {
	if n, ok := mechNames[m]; ok {
		return n
	}
	return m
}

// Decide derives the verdict from the evidence, in the seeds' order: a dirty
// transfer or an overwritten buffer names that layer; with both clean, graph ≠
// eager puts the fault in the captured replay's transient compute, and among
// the toggles that remove the corruption (fewer corrupted sessions, Fisher p
// below the toggle's Alpha — sessions.Significance shared by the toggles —
// no confound) and touch captured replay, the one
// with the smallest scope names the mechanism: the cause. Every other toggle
// that removed it is credited as a workaround, with how it relates to the
// cause (disabling graphs turns overlap off along with more; fp8 index-K
// moves the logits out of the graph arena, another condition of the fault).
func Decide(ev Evidence) Verdict {
	var v Verdict
	b := ev.Baseline
	if b.CorruptedSessions == 0 {
		v.Text = fmt.Sprintf("no corruption in the baseline (0/%d sessions): nothing to localize", b.Sessions)
		return v
	}
	v.Reasons = append(v.Reasons, fmt.Sprintf("baseline corrupts %d/%d sessions", b.CorruptedSessions, b.Sessions))
	if !ev.TransferClean() {
		v.Layer, v.Cause = "transfer", "pd-transfer"
		v.Text = fmt.Sprintf("the PD transfer: %d of %d rooms differ between prefill and decode (%d missing)", ev.RoomsMismatched, ev.Rooms, ev.RoomsMissing)
		return v
	}
	v.Reasons = append(v.Reasons, fmt.Sprintf("transfer clean (%d rooms match)", ev.RoomsMatched))
	if !ev.BufferPristine() {
		v.Layer, v.Cause = "persistent-buffer", "live-page-overwrite"
		v.Text = fmt.Sprintf("a persistent-buffer overwrite: %d live pages changed outside their request's writes", ev.LivePageOverwrites)
		return v
	}
	v.Reasons = append(v.Reasons, fmt.Sprintf("buffer pristine (0 live-page overwrites in %d replays)", ev.Replays))
	if !ev.GraphDiverges() {
		v.Text = "transfer clean, buffer pristine and graph = eager: the corruption lies outside the instrumented layers"
		return v
	}
	v.Layer = "transient-compute"
	v.Reasons = append(v.Reasons, fmt.Sprintf("graph ≠ eager (%d divergent samples)", ev.DivergentSamples))

	var fixes []ToggleResult
	underpowered, level := 0, 0.0 // toggles that lower it without reaching significance, and its level

	for _, t := range ev.Toggles {
		switch {
		case t.Removes && touchesGraph(t.Scope):
			fixes = append(fixes, t)
		case t.Removes:
			v.Reasons = append(v.Reasons, fmt.Sprintf("%s removes it but touches no captured-replay mechanism", t.Toggle))
		case len(t.Confounds) > 0 && t.Summary.CorruptedSessions < b.CorruptedSessions:
			v.Reasons = append(v.Reasons, fmt.Sprintf("%s lowers it but is confounded (%s)", t.Toggle, confoundNames(t.Confounds)))
		case t.Summary.CorruptedSessions < b.CorruptedSessions && t.FisherP >= t.Alpha:
			underpowered, level = underpowered+1, t.Alpha
			v.Reasons = append(v.Reasons, fmt.Sprintf("%s lowers it (%d/%d → %d/%d) but p = %s is not significant at this size", t.Toggle,
				b.CorruptedSessions, b.Sessions, t.Summary.CorruptedSessions, t.Summary.Sessions, sessions.FormatP(t.FisherP)))
		default:
			v.Reasons = append(v.Reasons, fmt.Sprintf("%s does not remove it (%d/%d, p = %s)", t.Toggle,
				t.Summary.CorruptedSessions, t.Summary.Sessions, sessions.FormatP(t.FisherP)))
		}
	}
	if len(fixes) == 0 && underpowered > 0 {
		lower := fmt.Sprintf("%d toggles lower", underpowered)
		if underpowered == 1 {
			lower = "1 toggle lowers"
		}
		v.lines = []string{
			fmt.Sprintf("graph ≠ eager puts the fault in captured compute, but %d sessions are too few to tell which toggle removes it.", b.Sessions),
			fmt.Sprintf("%s it without reaching p < %s (%g shared by the toggles).", lower, sessions.FormatP(level), sessions.Significance),
			"Rerun with more sessions (the seeds ran 80 × 4).",
		}
		v.Text = strings.Join(v.lines, " ")
		return v
	}
	if len(fixes) == 0 {
		v.Text = "graph ≠ eager puts the fault in captured compute, but no toggle removes it without confounds"
		return v
	}
	best := fixes[0]
	tie := false
	for _, f := range fixes[1:] {
		switch {
		case len(f.Scope) < len(best.Scope):
			best, tie = f, false
		case len(f.Scope) == len(best.Scope):
			tie = true
		}
	}
	if tie {
		var names []string
		for _, f := range fixes {
			if len(f.Scope) == len(best.Scope) {
				names = append(names, f.Toggle)
			}
		}
		v.Text = "captured compute; equally narrow toggles remove it: " + strings.Join(names, ", ") + " — toggle one mechanism at a time to separate them"
		return v
	}
	var mechs []string
	for _, m := range best.Scope {
		mechs = append(mechs, MechanismName(m))
	}
	if len(best.Scope) == 1 {
		v.Cause = best.Scope[0]
	} else {
		v.Cause = strings.Join(best.Scope, "+")
	}
	v.Reasons = append(v.Reasons, fmt.Sprintf("%s removes it: %d/%d → %d/%d, p = %s, no confounds", best.Toggle,
		b.CorruptedSessions, b.Sessions, best.Summary.CorruptedSessions, best.Summary.Sessions, sessions.FormatP(best.FisherP)))
	// Short sentences: the cause, the toggle that shows it, the layers'
	// evidence, then one sentence per workaround (it was one sentence of
	// 110 words).
	v.lines = []string{
		fmt.Sprintf("cause: %s inside captured decode graphs.", strings.Join(mechs, " + ")),
		fmt.Sprintf("%s removes the corruption (%d/%d → %d/%d, p = %s), the narrowest change that does.",
			best.Toggle, b.CorruptedSessions, b.Sessions, best.Summary.CorruptedSessions, best.Summary.Sessions, sessions.FormatP(best.FisherP)),
		"Transfer is clean, the buffer pristine, and graph ≠ eager.",
	}
	if w := workarounds(b, best, fixes); len(w) > 0 {
		v.Reasons = append(v.Reasons, "workarounds that also remove it: "+strings.Join(w, "; "))
		v.lines = append(v.lines, "Workarounds also remove it, but hide the bug and cost what else they turn off:")
		for _, x := range w {
			v.lines = append(v.lines, "  "+x+".")
		}
	}
	v.Text = strings.Join(strings.Fields(strings.Join(v.lines, " ")), " ")
	return v
}

// workarounds credits every other toggle that removed the corruption, saying
// in plain words how it relates to the cause: it turns the cause off along
// with more (its scope includes the cause's), or it removes another
// condition the fault needs (its scope does not).
func workarounds(b outcome.Summary, best ToggleResult, fixes []ToggleResult) []string {
	var out []string
	for _, f := range fixes {
		if f.Toggle == best.Toggle {
			continue
		}
		var more []string
		for _, m := range f.Scope {
			if !slices.Contains(best.Scope, m) {
				more = append(more, MechanismName(m))
			}
		}
		how := "removes another condition the fault needs (" + strings.Join(more, " and ") + ") and leaves the cause in place"
		if contains(f.Scope, best.Scope) {
			how = "turns the cause off together with " + strings.Join(more, " and ")
		}
		out = append(out, fmt.Sprintf("%s (%d/%d → %d/%d, p = %s) %s", f.Toggle, b.CorruptedSessions, b.Sessions,
			f.Summary.CorruptedSessions, f.Summary.Sessions, sessions.FormatP(f.FisherP), how))
	}
	return out
}

func touchesGraph(scope []string) bool {
	for _, m := range scope {
		if graphMechanisms[m] {
			return true
		}
	}
	return false
}

// contains reports whether every element of sub is in set.
func contains(set, sub []string) bool {
	for _, s := range sub {
		found := false
		for _, x := range set {
			found = found || x == s
		}
		if !found {
			return false
		}
	}
	return true
}

func confoundNames(cs []sessions.Confound) string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return strings.Join(n, ", ")
}
