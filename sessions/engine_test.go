package sessions

import (
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// wrappedRun is a bundle's reading of a wrapped run: wrap's manifest
// (--config stated or not), wrap's own run.start, then the engine
// processes' run.start events with their settings (provenance engine).
func wrappedRun(name string, stated hook.RunConfig, overlap bool) *RunStats {
	r := NewRunStats(name)
	r.SetManifest("kvcanary test", time.Unix(0, 0), hook.HostInfo{}, stated)
	r.Observe(hook.Event{Kind: hook.KindRunStart, Src: hook.Source{Proc: "kvcanary-wrap"}, Body: &hook.RunStart{Config: stated}})
	for _, role := range []string{"prefill", "decode"} {
		rep := hook.RunConfig{Engine: "sglang", CUDAGraph: hook.Bool(true), MultiStreamOverlap: hook.Bool(overlap), TPSize: 1,
			Provenance: map[string]string{"cuda_graph": hook.ProvEngine, "multi_stream_overlap": hook.ProvEngine, "tp_size": hook.ProvEngine}}
		r.Observe(hook.Event{Kind: hook.KindRunStart, Src: hook.Source{Proc: "python3", Role: role}, Body: &hook.RunStart{Config: rep}})
	}
	return r
}

func TestCompareNamesAnEngineReportedSettingWithoutAnyLabel(t *testing.T) {
	stated := hook.RunConfig{Engine: "sglang", Provenance: map[string]string{}}
	a, b := wrappedRun("a", stated, true), wrappedRun("b", stated, false)
	rep := Compare(a, b, CompareOptions{})
	if rep.FlagUnderTest == nil || rep.FlagUnderTest.Name != "multi_stream_overlap" {
		t.Fatalf("flag under test %+v, diffs %+v", rep.FlagUnderTest, rep.DifferingFlags)
	}
	if len(rep.DifferingFlags) != 1 {
		t.Errorf("differing %+v: only the overlap differs", rep.DifferingFlags)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "multi_stream_overlap  true -> false  (reported by the engine)") {
		t.Errorf("text:\n%s", out.String())
	}
}

func TestRunStatsShowsALabelTheEngineContradicts(t *testing.T) {
	stated := hook.RunConfig{Engine: "sglang", MultiStreamOverlap: hook.Bool(false), Provenance: map[string]string{"multi_stream_overlap": hook.ProvLabel}}
	r := wrappedRun("a", stated, true)
	if len(r.Contradictions) != 1 || r.Contradictions[0].Setting != "multi_stream_overlap" || r.Contradictions[0].Used != "true" {
		t.Fatalf("contradictions %+v", r.Contradictions)
	}
	if !*r.Config.MultiStreamOverlap || r.Config.Provenance["multi_stream_overlap"] != hook.ProvEngine {
		t.Errorf("config %+v", r.Config)
	}
	rep := Compare(r, wrappedRun("b", stated, true), CompareOptions{})
	found := false
	for _, n := range rep.Notes {
		found = found || strings.Contains(n, "run A: contradiction: multi_stream_overlap: label (--config) says false")
	}
	if !found {
		t.Errorf("notes %q", rep.Notes)
	}
}
