package hook

import (
	"bytes"
	"os"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook/internal/schema"
)

// TestGeneratedFilesCurrent regenerates every file derived from event.go in
// memory and compares it with the committed one: a schema change without
// `go generate` fails here instead of quietly switching a codec off.
func TestGeneratedFilesCurrent(t *testing.T) {
	files, err := schema.Generate(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("generator produced no files")
	}
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%s: %v; run go generate ./runtime/hook", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: it differs from what event.go generates; run go generate ./runtime/hook and commit the result", name)
		}
	}
}

// Every kind but run.start and gpu has a binary layout, and the kinds the
// benchmarks name as high-rate have a JSON fast path.
func TestSchemaCoverage(t *testing.T) {
	for _, k := range Kinds() {
		if !binaryBody[k] && k != KindRunStart && k != KindGPU {
			t.Errorf("%s has no binary layout (//hook:binary in event.go)", k)
		}
	}
	for _, k := range []Kind{KindReplay, KindSched, KindRoomChecksum, KindSession, KindCUDA} {
		if !fastBody[k] {
			t.Errorf("%s has no JSON fast path (//hook:fastjson in event.go)", k)
		}
	}
	for _, k := range Kinds() {
		if got := KindByName([]byte(k.String())); got != k {
			t.Errorf("KindByName(%q) = %v", k, got)
		}
	}
	if got := KindByName([]byte("nope")); got != KindInvalid {
		t.Errorf("KindByName(nope) = %v", got)
	}
}

// The check tags' value sets agree with the exported constants producers use.
func TestCheckTagsMatchConstants(t *testing.T) {
	for _, o := range Outcomes {
		if err := (&Session{ID: "s", Outcome: o}).validate(); err != nil {
			t.Errorf("outcome %q: %v", o, err)
		}
	}
	for _, m := range []string{ModeGraph, ModeEager} {
		if err := (&Replay{Mode: m}).validate(); err != nil {
			t.Errorf("mode %q: %v", m, err)
		}
	}
	for _, side := range []Side{SidePrefill, SideDecode} {
		for _, stage := range []string{"", StageSent, StageTransferred, StageAdmitted} {
			if err := (&RoomChecksum{Side: side, Stage: stage}).validate(); err != nil {
				t.Errorf("side %q stage %q: %v", side, stage, err)
			}
		}
	}
	for _, p := range []string{"", PhaseReplay, PhaseBetween} {
		if err := (&CanaryPages{Phase: p}).validate(); err != nil {
			t.Errorf("phase %q: %v", p, err)
		}
	}
	for _, sev := range []Severity{SevInfo, SevWarn, SevError} {
		if err := (&Finding{Severity: sev}).validate(); err != nil {
			t.Errorf("severity %q: %v", sev, err)
		}
	}
	if err := (&Session{Outcome: "lek"}).validate(); err == nil || err.Error() != `session outcome "lek" is not one of done|maxrounds|leak|no_tool|error|timeout` {
		t.Errorf("bad outcome: %v", err)
	}
}
