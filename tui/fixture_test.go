package tui

import (
	"fmt"
	"time"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// t0 is the fixture's first event time.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func at(sec float64) int64 { return t0 + int64(sec*1e9) }

// fixtureEvents is a small run with something for every panel: a run.start,
// sessions over 20 s (3 corrupted), scheduler lines with a retraction, room
// checksums, canary replays, graph-vs-eager samples, a GPU sample, CUDA
// calls and one finding from each analyzer (one with a hostile escape).
func fixtureEvents() []hook.Event {
	var evs []hook.Event
	add := func(ts int64, b hook.Body) {
		evs = append(evs, hook.Event{Kind: b.Kind(), TS: ts, Run: "fixture", Src: hook.Source{Proc: "sim"}, Body: b})
	}
	add(at(0), &hook.RunStart{Tool: "kvcanary test", Host: hook.HostInfo{OS: "sim", Arch: "twin"}, Config: hook.RunConfig{
		Engine: "sim", IndexKDtype: "bf16", CUDAGraph: hook.Bool(true), CUDAGraphMaxBS: 32, MultiStreamOverlap: hook.Bool(true),
		Disaggregation: "pd", MaxRunningRequests: 48, Sessions: 24, Rounds: 4, Seed: 7}})
	for i := 0; i < 20; i++ {
		add(at(float64(i)), &hook.Sched{Phase: "decode", RunningReq: 4 + i, QueueReq: i % 3, Tokens: 1000 * i, TokenUsage: float64(i) / 25})
		add(at(float64(i)+0.1), &hook.RoomChecksum{Room: hook.Dec64(i), Side: hook.SidePrefill, SeqLen: 100})
		add(at(float64(i)+0.2), &hook.CanaryPages{Step: uint64(i), PagesTotal: 100, PagesChecked: 10})
		add(at(float64(i)+0.3), &hook.GraphDiffSample{Step: uint64(i), Request: "r"})
	}
	add(at(12.5), &hook.Sched{Phase: "retract", RunningReq: 15, Retracted: 2, TokenUsage: 0.96})
	outcomes := []string{"done", "done", "maxrounds", "done", "leak", "done", "no_tool", "done", "done", "error", "done", "timeout"}
	for i, o := range outcomes {
		s := &hook.Session{ID: fmt.Sprintf("s%03d", i), Outcome: o, Rounds: 4}
		switch o {
		case hook.OutcomeLeak: // the evidence repro keeps, with a hostile escape in the reply
			s.Rounds, s.Round, s.Requests = 2, 2, []string{"chatcmpl-41", "chatcmpl-42"}
			s.Reason = "tool-call markup <tool_call> in content"
			s.Excerpt = "Let me check.\n<tool_call>{\"name\": \"get_weather\"}\x1b[2J"
		case hook.OutcomeNoTool:
			s.Rounds, s.Round, s.Requests = 1, 1, []string{"chatcmpl-7"}
			s.Reason, s.Excerpt = "no tool call (finish stop)", "The weather in Oslo is sunny."
		case hook.OutcomeError:
			s.Rounds, s.Round, s.Reason = 0, 1, "HTTP 503: server busy"
		}
		add(at(float64(8+i)), s)
	}
	add(at(19), &hook.Finding{Analyzer: "checksum", Severity: hook.SevError,
		Summary:  "room 12: index-K differs between prefill and decode in page-table entries 3 (tokens 192-255)",
		Evidence: map[string]string{"room": "12", "seq_len": "300", "prefill_xxh3": "0x00000000deadbeef", "decode_xxh3": "0x00000000feedface"}})
	add(at(19.2), &hook.Finding{Analyzer: "canary", Severity: hook.SevError,
		Summary:  `LIVE-PAGE-OVERWRITE: step 9 changed page 41 of running request "s003-r1" outside the step's expected stores`,
		Evidence: map[string]string{"class": "LIVE-PAGE-OVERWRITE", "step": "9", "page": "41", "victim": "s003-r1\x1b[31m"}})
	add(at(19.4), &hook.Finding{Analyzer: "graphdiff", Severity: hook.SevError,
		Summary:  "GRAPH≠EAGER step 17 request s004-r2: top-64 selection changed (Jaccard 0.000)",
		Evidence: map[string]string{"step": "17", "request": "s004-r2", "topk_jaccard": "0"}})
	add(at(19.6), &hook.Finding{Analyzer: "logscan", Severity: hook.SevWarn, Summary: "retraction under pool pressure\x07"})
	return evs
}

func gpuEvents() []hook.Event {
	return []hook.Event{
		{Kind: hook.KindGPU, TS: at(19.7), Body: &hook.GPU{Driver: "550.54", Devices: []hook.GPUDevice{
			{Index: 0, Name: "NVIDIA H200", MemUsed: 100 << 30, MemTotal: 141 << 30, UtilGPU: 87, TempC: 64},
			{Index: 1, Name: "NVIDIA H200", MemUsed: 90 << 30, MemTotal: 141 << 30, UtilGPU: 91, TempC: 66, Xid: 79},
		}}},
		{Kind: hook.KindCUDA, TS: at(19.1), Body: &hook.CUDA{Call: "cuGraphLaunch", PID: 42}},
		{Kind: hook.KindCUDA, TS: at(19.2), Body: &hook.CUDA{Call: "cuGraphLaunch", PID: 42}},
		{Kind: hook.KindCUDA, TS: at(19.3), Body: &hook.CUDA{Call: "cuLaunchKernel", PID: 42}},
		{Kind: hook.KindCUDA, TS: at(19.8), Body: &hook.CUDA{Call: "cuMemcpyAsync", PID: 42, Ret: 1}},
	}
}

func fixtureSummaries() *analyzers.Summaries {
	live := 1.0
	return &analyzers.Summaries{
		Checksum: &checksum.Summary{Rooms: 20, Matched: 17, Mismatched: 1, Warmup: 1, Missing: 1},
		Canary: &canary.Summary{Policy: "live", Replays: 20, PagesChecked: 200, PagesTotal: 2000, Coverage: 0.1, LiveCoverage: &live,
			ExpectedWrites: 40, BenignTransferWrites: 12, LivePageOverwrites: 1, MissingStores: 0},
		Graphdiff: &graphdiff.Summary{Samples: 20, Divergent: 2, JaccardHist: []graphdiff.HistBin{
			{Label: "[0,0.5)", Lo: 0, Hi: 0.5, Count: 2}, {Label: "[0.5,0.8)", Lo: 0.5, Hi: 0.8},
			{Label: "[0.8,0.9)", Lo: 0.8, Hi: 0.9}, {Label: "[0.9,1)", Lo: 0.9, Hi: 1, Count: 1}, {Label: "1", Lo: 1, Hi: 1, Count: 17}}},
	}
}

// zeroSummaries are the analyzers' summaries when they ran but saw none of
// their events (a real server's bundle).
func zeroSummaries() *analyzers.Summaries {
	return &analyzers.Summaries{Checksum: &checksum.Summary{}, Canary: &canary.Summary{Policy: "live"}, Graphdiff: &graphdiff.Summary{}}
}

// fixtureState folds events and summaries (nil: none polled) into a State
// as a frame would.
func fixtureState(evs []hook.Event, sums *analyzers.Summaries) *State {
	a := newAggregator("bundle fixture.kvtrace")
	for i := range evs {
		a.apply(&evs[i])
	}
	a.setSummaries(sums)
	s := a.snapshot(60)
	s.Elapsed = 42 * time.Second
	s.Rate = 12345
	s.Dropped = 7
	return &s
}
