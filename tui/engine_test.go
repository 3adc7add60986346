package tui

import (
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// An engine process's run.start of the same run merges its settings into
// the run's configuration (provenance engine), and a statement it
// contradicts is shown, never silently replaced.
func TestEngineRunStartMergesAndShowsContradictions(t *testing.T) {
	a := newAggregator("wrap")
	stated := hook.RunConfig{Engine: "sglang", MultiStreamOverlap: hook.Bool(false), Provenance: map[string]string{"multi_stream_overlap": hook.ProvLabel}}
	a.apply(&hook.Event{Kind: hook.KindRunStart, Run: "r1", Src: hook.Source{Proc: "kvcanary-wrap"}, Body: &hook.RunStart{Config: stated}})
	before := a.snapshot(0)
	rep := hook.RunConfig{Engine: "sglang", MultiStreamOverlap: hook.Bool(true), TPSize: 2,
		Provenance: map[string]string{"multi_stream_overlap": hook.ProvEngine, "tp_size": hook.ProvEngine}}
	a.apply(&hook.Event{Kind: hook.KindRunStart, Run: "r1", Src: hook.Source{Proc: "python3", Role: "decode"}, Body: &hook.RunStart{Config: rep}})
	s := a.snapshot(0)
	if s.Config == nil || s.Config.TPSize != 2 || !*s.Config.MultiStreamOverlap || s.Config.Engine != "sglang" {
		t.Fatalf("config %+v", s.Config)
	}
	if len(s.Contradictions) != 1 || !strings.Contains(s.Contradictions[0], "multi_stream_overlap: label (--config) says false, the engine (decode rank 0) reports true") {
		t.Fatalf("contradictions %q", s.Contradictions)
	}
	if *before.Config.MultiStreamOverlap || before.Config.Provenance["multi_stream_overlap"] != hook.ProvLabel {
		t.Error("an earlier snapshot changed")
	}
	line := configLine(asciiStyles(), s.Config)
	if !strings.Contains(line, "overlap on") || !strings.Contains(line, "tp 2") {
		t.Errorf("config line %q", line)
	}
}
