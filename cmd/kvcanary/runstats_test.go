package main

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
)

func TestRunStatsFromBundle(t *testing.T) {
	cfg := hook.RunConfig{Engine: "sim", IndexKDtype: "fp8", Sessions: 80, Rounds: 4, Concurrency: 80}
	host := hook.HostInfo{Hostname: "box", GPUs: []hook.GPUInfo{{Name: "H200"}}}
	path := filepath.Join(t.TempDir(), "fp8.kvtrace")
	w, err := traces.Create(path, traces.Manifest{Tool: "kvcanary test", Host: host, Config: cfg, Run: "r1", Created: time.Unix(1_750_000_000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	evs := []hook.Event{{Kind: hook.KindSched, TS: 1, Body: &hook.Sched{RunningReq: 30, TokenUsage: 0.5}}}
	for i := range 80 {
		o := hook.OutcomeDone
		if i == 7 {
			o = hook.OutcomeNoTool
		}
		evs = append(evs, hook.Event{Kind: hook.KindSession, TS: int64(2 + i), Body: &hook.Session{ID: fmt.Sprintf("s%03d", i), Outcome: o, Rounds: 4}})
	}
	evs = append(evs, hook.Event{Kind: hook.KindRunEnd, TS: 100, Body: &hook.RunEnd{WallNS: int64(time.Second)}})
	for _, ev := range evs {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := runStatsFromBundle(path)
	if err != nil {
		t.Fatal(err)
	}
	want := outcome.Counts{Done: 79, NoTool: 1}
	if r.Tool != "kvcanary test" || !reflect.DeepEqual(r.Config, cfg) || r.Outcomes != want || r.Truncated || r.Sched.PeakRunningReq != 30 {
		t.Errorf("from bundle: tool=%q cfg=%+v outcomes=%+v truncated=%v sched=%+v", r.Tool, r.Config, r.Outcomes, r.Truncated, r.Sched)
	}
	if s := r.Summary(); s.Sessions != 80 || s.CorruptedSessions != 1 {
		t.Errorf("summary = %+v", s)
	}
	if _, err := runStatsFromBundle(filepath.Join(t.TempDir(), "missing.kvtrace")); err == nil || !strings.Contains(err.Error(), "missing.kvtrace") {
		t.Errorf("missing bundle: err = %v", err)
	}
}
