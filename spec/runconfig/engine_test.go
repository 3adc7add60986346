package runconfig

import (
	"reflect"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// engineReport is a run.start config as the pyhook sends it.
func engineReport(overlap bool, tp int) hook.RunConfig {
	return hook.RunConfig{Engine: "sglang", CUDAGraph: hook.Bool(true), MultiStreamOverlap: hook.Bool(overlap), IndexKDtype: "fp8",
		TPSize: tp, Extra: map[string]string{"sglang_version": "0.5"},
		Provenance: map[string]string{"cuda_graph": hook.ProvEngine, "multi_stream_overlap": hook.ProvEngine,
			"index_k_dtype": hook.ProvEngine, "tp_size": hook.ProvEngine, "extra.sglang_version": hook.ProvEngine}}
}

func TestEngineMergeFillsUnknownWithEngineProvenance(t *testing.T) {
	rc := hook.RunConfig{Engine: "sglang", Provenance: map[string]string{}}
	var m EngineMerge
	if c := m.Merge(&rc, engineReport(true, 2), "decode", "decode rank 0"); len(c) != 0 {
		t.Fatalf("contradictions %v", c)
	}
	if rc.MultiStreamOverlap == nil || !*rc.MultiStreamOverlap || rc.TPSize != 2 || rc.IndexKDtype != "fp8" || rc.Extra["sglang_version"] != "0.5" {
		t.Fatalf("merged %+v", rc)
	}
	for _, k := range []string{"cuda_graph", "multi_stream_overlap", "index_k_dtype", "tp_size", "extra.sglang_version"} {
		if rc.Provenance[k] != hook.ProvEngine {
			t.Errorf("provenance %s = %q", k, rc.Provenance[k])
		}
	}
}

func TestEngineMergeLabelContradictedUsesTheEngine(t *testing.T) {
	rc := hook.RunConfig{Engine: "sglang", MultiStreamOverlap: hook.Bool(false), CUDAGraph: hook.Bool(true),
		Provenance: map[string]string{"multi_stream_overlap": hook.ProvLabel, "cuda_graph": hook.ProvLabel}}
	var m EngineMerge
	got := m.Merge(&rc, engineReport(true, 1), "", "rank 0")
	want := []Contradiction{{Setting: "multi_stream_overlap", Stated: "false", StatedBy: "label (--config)", Engine: "true", Reporter: "rank 0", Used: "true"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("contradictions %+v, want %+v", got, want)
	}
	if !*rc.MultiStreamOverlap || rc.Provenance["multi_stream_overlap"] != hook.ProvEngine {
		t.Errorf("overlap %v (%s): the engine's value is what ran", *rc.MultiStreamOverlap, rc.Provenance["multi_stream_overlap"])
	}
	// a label the engine confirms is the engine's word now, and no contradiction
	if rc.Provenance["cuda_graph"] != hook.ProvEngine {
		t.Errorf("confirmed label: provenance %q", rc.Provenance["cuda_graph"])
	}
	if s := got[0].String(); s != "multi_stream_overlap: label (--config) says false, the engine (rank 0) reports true; using true" {
		t.Errorf("String %q", s)
	}
}

func TestEngineMergeProcessesOfOneRoleDisagree(t *testing.T) {
	rc := hook.RunConfig{Engine: "sglang"}
	var m EngineMerge
	m.Merge(&rc, engineReport(true, 2), "decode", "decode rank 0")
	got := m.Merge(&rc, engineReport(false, 2), "decode", "decode rank 1")
	if len(got) != 1 || got[0].Setting != "multi_stream_overlap" || got[0].Used != "true" || got[0].Engine != "false" || got[0].StatedBy != "another engine process" {
		t.Fatalf("contradictions %+v", got)
	}
	if !*rc.MultiStreamOverlap {
		t.Error("the first report stays")
	}
}

func TestEngineMergeDecodeReplacesPrefillWithoutContradiction(t *testing.T) {
	rc := hook.RunConfig{Engine: "sglang"}
	var m EngineMerge
	m.Merge(&rc, engineReport(true, 1), "prefill", "prefill rank 0")
	if got := m.Merge(&rc, engineReport(false, 4), "decode", "decode rank 0"); len(got) != 0 {
		t.Fatalf("two PD roles are two engines: %+v", got)
	}
	if *rc.MultiStreamOverlap || rc.TPSize != 4 {
		t.Errorf("the decode side's settings are the run's: %+v", rc)
	}
	// and a prefill report after a decode one changes nothing
	if got := m.Merge(&rc, engineReport(true, 1), "prefill", "prefill rank 1"); len(got) != 0 || *rc.MultiStreamOverlap || rc.TPSize != 4 {
		t.Errorf("prefill after decode: %+v %+v", got, rc)
	}
}

func TestEngineMergeIgnoresValuesWithoutEngineProvenance(t *testing.T) {
	rep := engineReport(true, 2)
	rep.Provenance = map[string]string{"tp_size": hook.ProvEngine}
	rc := hook.RunConfig{Engine: "sglang"}
	var m EngineMerge
	m.Merge(&rc, rep, "", "rank 0")
	if rc.MultiStreamOverlap != nil || rc.TPSize != 2 {
		t.Errorf("only engine-provenance values count: %+v", rc)
	}
}
