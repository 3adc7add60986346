package tui

import (
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// A bundle without run.start (sim serve writes none) still has its
// configuration in the manifest: the header shows it, not "configuration
// unknown"; a run.start, when one comes, takes over.
func TestHeaderShowsTheManifestsConfig(t *testing.T) {
	man := traces.Manifest{Command: "sim serve", Config: hook.RunConfig{Engine: "sim", IndexKDtype: "bf16", CUDAGraph: hook.Bool(true),
		CUDAGraphMaxBS: 32, MultiStreamOverlap: hook.Bool(true), Disaggregation: "pd", Seed: 1}}
	evs := []hook.Event{{Kind: hook.KindSession, TS: 1, Body: &hook.Session{ID: "s000", Outcome: hook.OutcomeDone, Rounds: 2}}}
	m := New(Options{Source: "bundle served.kvtrace", Styles: asciiStyles(), Manifest: man})
	m.Update(tea.WindowSizeMsg{Width: 160, Height: 40})
	m.Update(frameMsg{at: wall0, batch: &evs, open: true, summaries: zeroSummaries()})
	h := m.header.View()
	if strings.Contains(h, "no run.start yet") || !strings.Contains(h, "graph on (max bs 32)") || !strings.Contains(h, "overlap on") {
		t.Fatalf("header of a bundle whose manifest holds the configuration:\n%s", h)
	}
	start := []hook.Event{{Kind: hook.KindRunStart, TS: 2, Body: &hook.RunStart{Config: hook.RunConfig{Engine: "sim", CUDAGraph: hook.Bool(false)}}}}
	m.Update(frameMsg{at: wall0, batch: &start, open: true, summaries: zeroSummaries()})
	if h := m.header.View(); !strings.Contains(h, "graph off") {
		t.Fatalf("a run.start takes over:\n%s", h)
	}

	// Without either, the configuration is unknown, and says so.
	m = New(Options{Source: "bundle other.kvtrace", Styles: asciiStyles()})
	m.Update(tea.WindowSizeMsg{Width: 160, Height: 40})
	m.Update(frameMsg{at: wall0, batch: &evs, open: true, summaries: zeroSummaries()})
	if h := m.header.View(); !strings.Contains(h, "no run.start yet: configuration unknown") {
		t.Fatalf("no manifest config, no run.start:\n%s", h)
	}
}

// The seed belongs to a workload (the twin's, repro's): an engine's run under
// wrap has none, and its header shows no "seed 0".
func TestHeaderSeedOnlyWithAWorkload(t *testing.T) {
	st := asciiStyles()
	if l := configLine(st, &hook.RunConfig{Engine: "sglang", CUDAGraph: hook.Bool(true)}); strings.Contains(l, "seed") {
		t.Fatalf("wrap's engine: %q", l)
	}
	for _, c := range []hook.RunConfig{{Engine: "sim", Seed: 0}, {Engine: "remote", Sessions: 80, Rounds: 4, Seed: 1}} {
		if l := configLine(st, &c); !strings.Contains(l, "seed") {
			t.Fatalf("%+v: %q", c, l)
		}
	}
}
