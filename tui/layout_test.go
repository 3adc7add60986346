package tui

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// TestMinimumSizeShowsDecisiveNumbers: at 80×24, the advertised minimum,
// each panel's decisive number is on screen — the corruption rate, the
// mismatched rooms, the LIVE-PAGE-OVERWRITE row, the divergent count — and
// so is the help key.
func TestMinimumSizeShowsDecisiveNumbers(t *testing.T) {
	m := testModel(t, MinWidth, MinHeight, false)
	out := m.View()
	for _, re := range []string{`corrupt 3/12 = 25\.0%`, `mismatched 1`, `LIVE-PAGE-OVERWRITE 1`, `divergent 2`, `retract 1`, `\? help`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("80×24 lacks %s:\n%s", re, out)
		}
	}
}

// TestMinimumSizeNothingCut: at 80×24 the header, the footer, the canary's
// coverage row, the sessions panel's last outcome row and every column of
// the help overlay are on screen whole: a header item that does not fit is
// left out whole, counted, and listed in the help overlay.
func TestMinimumSizeNothingCut(t *testing.T) {
	m := testModel(t, MinWidth, MinHeight, false)
	m.View()
	out := m.View()
	lines := strings.Split(out, "\n")
	for _, i := range []int{0, 1, 2, len(lines) - 1} {
		if strings.Contains(lines[i], "…") {
			t.Errorf("line %d is cut: %q", i, lines[i])
		}
	}
	for _, want := range []string{"+2 more", "disagg pd  +3 more", "done 7", "live 100.0%", "s snapshot", "p pause"} {
		if !strings.Contains(out, want) {
			t.Errorf("80×24 lacks %q:\n%s", want, out)
		}
	}
	press(m, "?")
	m.View()
	help := m.View()
	for _, want := range []string{"/ filter", "p pause view", "q quit", "G    newest (follow)", "fills a cell",
		"not in the header:", "host sim/twin", "kvcanary test", "max-running 48", "sessions 24×4", "seed 7", "any key closes the help"} {
		if !strings.Contains(help, want) {
			t.Errorf("the 80×24 help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "…") {
		t.Errorf("the 80×24 help is cut:\n%s", help)
	}
}

// TestUnfedPanelsCollapse: until GPU samples or CUDA calls arrive, their
// panels leave the grid (and the tab order) for one line naming the command
// that feeds them; the first sample brings the panel back.
func TestUnfedPanelsCollapse(t *testing.T) {
	m := testModelOf(t, 120, 40, false, fixtureEvents())
	out := m.View()
	if !strings.Contains(out, "no GPU samples (kvcanary gpu --emit ADDR feeds this) · no CUDA calls (kvcanary probe cuda --emit ADDR feeds this)") ||
		strings.Contains(out, "GPU (") || strings.Contains(out, "CUDA (") {
		t.Fatalf("unfed panels not collapsed:\n%s", out)
	}
	var focus []string
	for range 7 {
		press(m, "tab")
		focus = append(focus, m.Focused())
	}
	if strings.Join(focus, " ") != "sessions checksum canary graphdiff scheduler findings sessions" {
		t.Fatalf("tab order over unfed panels: %v", focus)
	}
	gpu := onlyKind(gpuEvents(), hook.KindGPU)
	m.Update(frameMsg{at: wall0.Add(2 * time.Second), batch: &gpu, open: true})
	out = m.View()
	if !strings.Contains(out, "GPU (1 samples) driver 550.54") || strings.Contains(out, "no GPU samples") ||
		!strings.Contains(out, "no CUDA calls (kvcanary probe cuda --emit ADDR feeds this)") {
		t.Fatalf("after a GPU sample:\n%s", out)
	}
	checkSize(t, out, 120, 40)
	press(m, "shift+tab", "shift+tab") // sessions → findings → gpu (cuda is still unfed)
	if m.Focused() != "gpu" {
		t.Fatalf("shift+tab twice from sessions: %s, want gpu", m.Focused())
	}
}

// TestWideStatusNotCut: at 120 columns a snapshot's full path and the
// PAUSED word are on screen.
func TestWideStatusNotCut(t *testing.T) {
	m := testModel(t, 120, 40, false)
	dir := filepath.Join("/home/someone/.local/state/kvcanary/snapshots")
	path := filepath.Join(dir, "kvcanary-snapshot-20260101T000042.000Z.kvtrace")
	press(m, "p")
	m.Update(SnapshotMsg{Path: path, Events: 103})
	out := m.View()
	if !strings.Contains(out, path) || !strings.Contains(out, "PAUSED (ingest continues)") {
		t.Fatalf("120 columns cut the path or PAUSED:\n%s", out)
	}
	press(m, "p") // any key returns the footer to the keys
	if out := m.View(); strings.Contains(out, path) || !strings.Contains(out, "? help") {
		t.Fatalf("after a key the footer still shows the status:\n%s", out)
	}
}

// TestFilterKeys: ctrl+u empties the filter input, esc clears an applied
// filter, and the filter that enter on an analyzer's panel sets does not
// outlive leaving the findings panel.
func TestFilterKeys(t *testing.T) {
	m := testModel(t, 120, 40, false)
	press(m, "/", "c", "a", "n", "ctrl+u")
	if !m.filtering || m.filterBuf != "" || m.findings.Filter() != "" {
		t.Fatalf("ctrl+u: filtering %v input %q filter %q", m.filtering, m.filterBuf, m.findings.Filter())
	}
	press(m, "c", "a", "n", "a", "r", "y", "enter")
	if m.filtering || m.findings.Filter() != "canary" || len(m.findings.shown) != 1 {
		t.Fatalf("enter keeps: filtering %v filter %q shown %d", m.filtering, m.findings.Filter(), len(m.findings.shown))
	}
	press(m, "tab") // a typed filter stays across focus changes
	if m.findings.Filter() != "canary" {
		t.Fatalf("tab dropped a typed filter")
	}
	press(m, "esc")
	if m.findings.Filter() != "" || len(m.findings.shown) != 7 {
		t.Fatalf("esc: filter %q shown %d", m.findings.Filter(), len(m.findings.shown))
	}
	// enter on the graphdiff panel: its findings, until focus moves on.
	press(m, "tab", "tab", "tab")
	if m.Focused() != "graphdiff" {
		t.Fatalf("focus %s, want graphdiff", m.Focused())
	}
	press(m, "enter")
	if m.Focused() != "findings" || m.findings.Filter() != "graphdiff" {
		t.Fatalf("enter on graphdiff: focus %s filter %q", m.Focused(), m.findings.Filter())
	}
	press(m, "tab")
	if m.findings.Filter() != "" || len(m.findings.shown) != 7 {
		t.Fatalf("the panel's filter stuck after tab: %q", m.findings.Filter())
	}
	press(m, "shift+tab", "shift+tab", "shift+tab", "shift+tab", "shift+tab", "shift+tab", "enter", "esc")
	if m.findings.Filter() != "" {
		t.Fatalf("esc left the panel's filter %q (focus %s)", m.findings.Filter(), m.Focused())
	}
}

// TestSnapshotDefaultDir: without a snapshot directory, `s` writes under
// $XDG_STATE_HOME/kvcanary/snapshots, created on demand, and names the file
// by its absolute path.
func TestSnapshotDefaultDir(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	m := testModel(t, 120, 40, false)
	msg := press(m, "s")().(SnapshotMsg)
	want := filepath.Join(state, "kvcanary", "snapshots")
	if msg.Err != nil || filepath.Dir(msg.Path) != want {
		t.Fatalf("snapshot %q, %v; want it in %s", msg.Path, msg.Err, want)
	}
	if _, err := os.Stat(msg.Path); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", state)
	if d, err := DefaultSnapshotDir(); err != nil || d != filepath.Join(state, ".local", "state", "kvcanary", "snapshots") {
		t.Fatalf("without XDG_STATE_HOME: %q, %v", d, err)
	}
}

// TestSourcesGrouped: events from several hosts and roles are counted per
// group and the header names the groups; one source keeps the host field.
func TestSourcesGrouped(t *testing.T) {
	var g sourceGroups
	src := []hook.Source{{Node: "gpu-a", Proc: "sglang-prefill"}, {Node: "gpu-b", Proc: "sglang-decode"}, {Node: "gpu-a", Proc: "sglang-prefill"}, {}}
	for i := 0; i < 10; i++ {
		ev := hook.Event{Src: src[i%len(src)]}
		g.add(&ev)
	}
	rows := g.snapshot()
	if len(rows) != 2 || rows[0] != (SourceRow{"gpu-a/sglang-prefill", 5}) || rows[1] != (SourceRow{"gpu-b/sglang-decode", 3}) {
		t.Fatalf("groups %+v", rows)
	}
	for i := 0; i < maxSourceGroups+3; i++ {
		ev := hook.Event{Src: hook.Source{Node: fmt.Sprintf("n%03d", i)}}
		g.add(&ev)
		g.add(&ev)
	}
	rows = g.snapshot()
	if len(rows) != maxSourceGroups+1 || rows[len(rows)-1] != (SourceRow{"other", 10}) {
		t.Fatalf("bounded groups: %d rows, last %+v", len(rows), rows[len(rows)-1])
	}
	line := sourcesLine(asciiStyles(), rows[:2])
	if !strings.Contains(line, "sources gpu-a/sglang-prefill 5 · gpu-b/sglang-decode 3") {
		t.Fatalf("sources line %q", line)
	}
	if sourcesLine(asciiStyles(), rows[:1]) != "" {
		t.Fatal("one source got a sources line")
	}
	// An engine that states its role and rank is grouped by them, not by
	// its process name.
	var r sourceGroups
	for _, s := range []hook.Source{{Node: "h1", Proc: "sglang", Role: "prefill", Rank: 0}, {Node: "h1", Proc: "sglang", Role: "prefill", Rank: 1},
		{Node: "h2", Proc: "sglang", Role: "decode", Rank: 1}, {Node: "h1", Proc: "sglang", Role: "prefill", Rank: 1}} {
		ev := hook.Event{Src: s}
		r.add(&ev)
	}
	rows = r.snapshot()
	if len(rows) != 3 || rows[1] != (SourceRow{"h1/prefill r1", 2}) || rows[2] != (SourceRow{"h2/decode r1", 1}) {
		t.Fatalf("role groups %+v", rows)
	}
}

// TestHeaderKeepsALongSource: a source longer than the line is clipped, never
// left out of the header.
func TestHeaderKeepsALongSource(t *testing.T) {
	p := NewHeaderPanel(asciiStyles(), "kvcanary wrap")
	p.SetSize(MinWidth, 3)
	p.Update(StateMsg{State: &State{Source: "wrap python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8", Run: "r1"}})
	l1 := strings.Split(p.View(), "\n")[0]
	if !strings.HasPrefix(l1, "kvcanary wrap  source wrap python3 -m sglang.launch_server") || !strings.HasSuffix(l1, "…") {
		t.Fatalf("header line 1 %q", l1)
	}
	if left := p.LeftOut(); len(left) != 1 || !strings.Contains(left[0], "run") {
		t.Fatalf("left out %q, want the run", left)
	}
}
