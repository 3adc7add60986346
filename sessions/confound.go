package sessions

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/runconfig"
)

// Confound is one way two runs differ besides the flag under test. A and B
// are the two runs' values (numbers, strings or booleans).
type Confound struct {
	Name string `json:"name"`
	A    any    `json:"a"`
	B    any    `json:"b"`
	Note string `json:"note"`
}

// FlagDiff is one engine flag whose value differs between two runs.
type FlagDiff struct {
	Name string `json:"name"`
	A    any    `json:"a"`
	B    any    `json:"b"`
}

// Thresholds for calling a scheduler difference a confound.
const (
	// PeakRunningTolerance: peak running requests differing by more than this
	// fraction of the larger peak are a confound.
	PeakRunningTolerance = 0.20
	// TokenUsageTolerance: peak token usage (fraction of the pool) differing
	// by more than this much is a confound.
	TokenUsageTolerance = 0.10
	// RetractionRatio: retraction counts (both non-zero) differing by more
	// than this factor are a confound; retractions in one arm only always are.
	RetractionRatio = 2.0
)

// EngineFlags names the engine flags EngineFlagDiffs compares, in its order;
// flags kept in RunConfig.Extra are named "extra.<key>" and server-reported
// args without a field "server.<arg>" besides these.
var EngineFlags = []string{"index_k_dtype", "cuda_graph", "cuda_graph_max_bs", "multi_stream_overlap",
	"disaggregation", "max_running_requests", "pool_tokens", "tp_size", "inject"}

// IsEngineFlag reports whether name can name a flag under test: one of
// EngineFlags, "extra.<key>" or "server.<arg>".
func IsEngineFlag(name string) bool {
	for _, p := range []string{"extra.", "server."} {
		if key, ok := strings.CutPrefix(name, p); ok {
			return key != ""
		}
	}
	for _, f := range EngineFlags {
		if f == name {
			return true
		}
	}
	return false
}

// EngineFlagDiffs lists the engine flags (the run configuration minus the
// workload: sessions, rounds, concurrency, seed, model, engine, URL) whose
// values are known in both runs and differ, in a fixed order: EngineFlags,
// then "extra.<key>" and "server.<arg>" sorted. Unknown is not a value: a
// setting one run does not know is not a difference (see UnknownFlagDiffs).
// The twin states every setting it has, so in a twin run an absent extra
// key reads as "".
func EngineFlagDiffs(a, b hook.RunConfig) []FlagDiff {
	d, _ := flagDiffs(a, b)
	return d
}

// UnknownFlagDiffs lists the engine flags known in one run only: A or B is
// nil on the side that does not know it.
func UnknownFlagDiffs(a, b hook.RunConfig) []FlagDiff {
	_, u := flagDiffs(a, b)
	return u
}

func flagDiffs(a, b hook.RunConfig) (diffs, unknown []FlagDiff) {
	ka, kb := settingMap(a), settingMap(b)
	for _, name := range settingOrder(a, b) {
		va, okA := ka[name]
		vb, okB := kb[name]
		if !okA && a.Engine == "sim" && strings.HasPrefix(name, "extra.") {
			va, okA = "", true
		}
		if !okB && b.Engine == "sim" && strings.HasPrefix(name, "extra.") {
			vb, okB = "", true
		}
		switch {
		case okA && okB:
			if va != vb {
				diffs = append(diffs, FlagDiff{Name: name, A: va, B: vb})
			}
		case okA:
			unknown = append(unknown, FlagDiff{Name: name, A: va})
		case okB:
			unknown = append(unknown, FlagDiff{Name: name, B: vb})
		}
	}
	return diffs, unknown
}

func settingMap(rc hook.RunConfig) map[string]any {
	m := map[string]any{}
	for _, s := range runconfig.KnownSettings(rc) {
		m[s.Name] = s.Value
	}
	m["inject"] = sortedJoin(rc.Inject) // kvcanary's own faults: always known ("" none)
	return m
}

// settingOrder is the union of both runs' setting names: EngineFlags order,
// then extra.* and server.* sorted.
func settingOrder(a, b hook.RunConfig) []string {
	seen := map[string]bool{}
	var rest []string
	for _, rc := range []hook.RunConfig{a, b} {
		for _, s := range runconfig.KnownSettings(rc) {
			if !seen[s.Name] && (strings.HasPrefix(s.Name, "extra.") || strings.HasPrefix(s.Name, "server.")) {
				rest = append(rest, s.Name)
			}
			seen[s.Name] = true
		}
	}
	sort.Strings(rest)
	return append(slices.Clone(EngineFlags), rest...)
}

func sortedJoin(ss []string) string {
	c := append([]string(nil), ss...)
	sort.Strings(c)
	return strings.Join(c, ",")
}

// Confounds compares two runs and returns the engine flags that differ, the
// one under test (nil when it cannot be named), and every confound. flag names
// the flag under test ("" to infer it: it is the differing flag when exactly
// one differs). Every differing engine flag other than the one under test is
// a confound, as are differences in workload (rounds, sessions, concurrency),
// model and engine, scheduler pressure (peak running requests, peak token
// usage, retractions), hardware (GPU count and model, host) and tool version.
func Confounds(a, b *RunStats, flag string) (diffs []FlagDiff, underTest *FlagDiff, cs []Confound) {
	diffs = EngineFlagDiffs(a.Config, b.Config)
	switch {
	case flag != "":
		for i := range diffs {
			if diffs[i].Name == flag {
				d := diffs[i]
				underTest = &d
			}
		}
	case len(diffs) == 1:
		d := diffs[0]
		underTest = &d
	}
	for _, d := range diffs {
		if underTest != nil && d.Name == underTest.Name {
			continue
		}
		note := "engine flag differs besides the flag under test"
		if underTest == nil {
			note = fmt.Sprintf("engine flag differs; %d engine flags differ, so no single flag can be credited (name the one under test with --flag)", len(diffs))
			if flag != "" {
				note = fmt.Sprintf("engine flag differs; the named flag under test %q does not", flag)
			}
		}
		cs = append(cs, Confound{Name: d.Name, A: d.A, B: d.B, Note: note})
	}

	ra, rb := a.Rounds(), b.Rounds()
	if ra != rb {
		cs = append(cs, Confound{Name: "rounds", A: ra, B: rb, Note: fmt.Sprintf(
			"sessions ran %d vs %d rounds: longer sessions give corruption more chances and done/maxrounds are not comparable; rerun with equal rounds", ra, rb)})
	}
	sa, sb := a.Outcomes.Total(), b.Outcomes.Total()
	if sa != sb {
		cs = append(cs, Confound{Name: "sessions", A: sa, B: sb, Note: "different numbers of sessions: the test accounts for sample size, but the offered load differs"})
	}
	cs = append(cs, workloadExtraConfounds(a.Config, b.Config)...)
	if a.Config.Concurrency != b.Config.Concurrency {
		cs = append(cs, Confound{Name: "concurrency", A: a.Config.Concurrency, B: b.Config.Concurrency,
			Note: "different offered concurrency: batch size drives this bug class"})
	}
	// Tool time and step pacing: "" is unknown (an older bundle, a real
	// engine), not a difference.
	if ta, tb := a.Config.ToolTime, b.Config.ToolTime; ta != "" && tb != "" && ta != tb {
		cs = append(cs, Confound{Name: "tool_time", A: ta, B: tb,
			Note: "different client tool time between rounds: it sets how far sessions drift apart, so batch sizes and how many decode steps replay a captured graph (at or below cuda-graph-max-bs) differ"})
	}
	if sa, sb := a.Config.StepTime, b.Config.StepTime; sa != "" && sb != "" && sa != sb {
		cs = append(cs, Confound{Name: "step_time", A: sa, B: sb,
			Note: "the twin's engine step took different wall times, so the same tool time spans a different number of engine steps"})
	}
	if a.Config.Model != b.Config.Model {
		cs = append(cs, Confound{Name: "model", A: a.Config.Model, B: b.Config.Model, Note: "different models"})
	}
	if a.Config.Engine != b.Config.Engine {
		cs = append(cs, Confound{Name: "engine", A: a.Config.Engine, B: b.Config.Engine, Note: "different serving engines"})
	}
	cs = append(cs, schedConfounds(a, b)...)

	if ga, gb := a.GPUCount(), b.GPUCount(); ga > 0 && gb > 0 && ga != gb {
		cs = append(cs, Confound{Name: "gpu_count", A: ga, B: gb, Note: fmt.Sprintf(
			"different hardware: %d vs %d GPUs — memory headroom, pool size and retraction pressure differ", ga, gb)})
	}
	if ma, mb := a.GPUModels(), b.GPUModels(); ma != "" && mb != "" && ma != mb {
		cs = append(cs, Confound{Name: "gpu_model", A: ma, B: mb, Note: "different GPU models"})
	}
	if ha, hb := a.Host.Hostname, b.Host.Hostname; ha != "" && hb != "" && ha != hb {
		cs = append(cs, Confound{Name: "host", A: ha, B: hb, Note: "runs on different machines"})
	}
	if a.Tool != "" && b.Tool != "" && a.Tool != b.Tool {
		cs = append(cs, Confound{Name: "tool_version", A: a.Tool, B: b.Tool, Note: "recorded by different kvcanary versions"})
	}
	return diffs, underTest, cs
}

func schedConfounds(a, b *RunStats) []Confound {
	ha, hb := a.Sched.Observations > 0, b.Sched.Observations > 0
	if ha != hb {
		return []Confound{{Name: "sched_data", A: a.Sched.Observations, B: b.Sched.Observations,
			Note: "scheduler observations in one run only: peak concurrency, pool pressure and retractions cannot be compared (record the server log, e.g. repro --server-log)"}}
	}
	if !ha {
		return nil
	}
	var cs []Confound
	pa, pb := a.Sched.PeakRunningReq, b.Sched.PeakRunningReq
	if hi := max(pa, pb); hi > 0 && float64(absInt(pa-pb)) > PeakRunningTolerance*float64(hi) {
		lower := "B"
		if pa < pb {
			lower = "A"
		}
		cs = append(cs, Confound{Name: "peak_running_req", A: pa, B: pb, Note: fmt.Sprintf(
			"run %s's peak concurrency is %.0f%% lower (%d vs %d): fewer simultaneous decodes give a concurrency bug fewer chances — a run that finishes sessions faster looks cleaner without being fixed",
			lower, 100*float64(absInt(pa-pb))/float64(max(pa, pb)), min(pa, pb), max(pa, pb))})
	}
	ua, ub := a.Sched.PeakTokenUsage, b.Sched.PeakTokenUsage
	if math.Abs(ua-ub) > TokenUsageTolerance {
		cs = append(cs, Confound{Name: "peak_token_usage", A: ua, B: ub, Note: fmt.Sprintf(
			"KV pool pressure differs (peak token usage %.2f vs %.2f)", ua, ub)})
	}
	xa, xb := a.Sched.Retractions, b.Sched.Retractions
	if (xa > 0) != (xb > 0) || (xa > 0 && xb > 0 && float64(max(xa, xb)) > RetractionRatio*float64(min(xa, xb))) {
		which := "both runs, in very different numbers"
		if xb == 0 {
			which = "run A only"
		} else if xa == 0 {
			which = "run B only"
		}
		cs = append(cs, Confound{Name: "retractions", A: xa, B: xb, Note: fmt.Sprintf(
			"retractions in %s: pool pressure differs between the runs; retractions may be non-causal (they follow load)", which)})
	}
	return cs
}

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// workloadExtraConfounds lists the workload keys of Extra (sampling
// settings, conversations, headers) whose values differ between two runs.
func workloadExtraConfounds(a, b hook.RunConfig) []Confound {
	keys := map[string]bool{}
	for k := range a.Extra {
		keys[k] = runconfig.IsWorkloadExtra(k)
	}
	for k := range b.Extra {
		keys[k] = runconfig.IsWorkloadExtra(k)
	}
	var names []string
	for k, w := range keys {
		if w && a.Extra[k] != b.Extra[k] {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var cs []Confound
	for _, k := range names {
		cs = append(cs, Confound{Name: "extra." + k, A: a.Extra[k], B: b.Extra[k],
			Note: "the client's workload differs (sampling, conversations or request headers): it changes what the model says, so the runs are not a like-for-like comparison"})
	}
	return cs
}
