package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

func TestCanaryReportFlags(t *testing.T) {
	wantOptions(t, NewCmdCanary, []string{"report", "run.kvtrace", "--json"}, func(o *CanaryReportOptions) bool {
		return o.Path == "run.kvtrace" && o.JSON.JSON
	})
	wantUsage(t, NewCmdCanary, "report")
}

// writeCanaryBundle writes a bundle with one replay per element of changes.
func writeCanaryBundle(t *testing.T, replays []hook.CanaryPages) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.kvtrace")
	w, err := traces.Create(path, traces.Manifest{Run: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range replays {
		if err := w.Write(hook.Event{Kind: hook.KindCanaryPages, TS: int64(i + 1), Body: &replays[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write(hook.Event{Kind: hook.KindReplay, TS: 99, Body: &hook.Replay{Step: 1, Mode: "graph"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func cleanReplay(step uint64) hook.CanaryPages {
	return hook.CanaryPages{
		Step: step, Policy: "live", PagesTotal: 1000, PagesChecked: 40, LivePages: 36, LiveChecked: 36, SlotChecked: true,
		Expected: []uint32{10, 20}, Padding: []uint32{0}, Transfer: []uint32{500},
		Running: []string{"req-1", "req-2"},
		Changed: []hook.PageChange{
			{Page: 0, Before: 1, After: 2},
			{Page: 10, Owner: "req-1", Before: 3, After: 4},
			{Page: 20, Owner: "req-2", Before: 5, After: 6},
			{Page: 500, Owner: "req-incoming", Before: 7, After: 8},
		},
	}
}

func runCanaryReport(t *testing.T, path string, tty, asJSON bool) (string, string, error) {
	t.Helper()
	ios, _, out, errOut := cmdutil.Test()
	ios.SetTTY(tty, tty)
	err := canaryReportRun(&CanaryReportOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: asJSON}, Path: path})
	return out.String(), errOut.String(), err
}

func TestCanaryReportBundleClean(t *testing.T) {
	// Enough replays for a thousands separator; the report reads the
	// bundle three times (5,120 replays took most of a minute under -race).
	const n = 1200
	var rs []hook.CanaryPages
	for s := range uint64(n) {
		rs = append(rs, cleanReplay(s))
	}
	path := writeCanaryBundle(t, rs)
	for _, tty := range []bool{true, false} {
		out, _, err := runCanaryReport(t, path, tty, false)
		if err != nil {
			t.Fatalf("tty=%v: %v", tty, err)
		}
		if !strings.HasPrefix(out, "LIVE-PAGE-OVERWRITE hits: 0 in 1,200 replays (live coverage 100%)\n") {
			t.Fatalf("tty=%v headline:\n%s", tty, out)
		}
		if !strings.Contains(out, "4% of the pool per replay") || !strings.Contains(out, "slot by slot in every replay") {
			t.Fatalf("coverage line missing:\n%s", out)
		}
		// Aligned in a pipe as on a terminal (cmdutil.WriteTable).
		if !strings.Contains(out, "benign-transfer  ") || strings.Contains(out, "\t") || !strings.Contains(out, "1,200") {
			t.Fatalf("tty=%v class table:\n%s", tty, out)
		}
	}
	out, _, err := runCanaryReport(t, path, false, true)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Format string         `json:"format"`
		Canary map[string]any `json:"canary"`
		Bundle map[string]any `json:"bundle"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Format != "bundle" || rep.Canary["replays"] != float64(n) || rep.Canary["expected_writes"] != float64(3*n) ||
		rep.Canary["benign_transfer_writes"] != float64(n) || rep.Canary["live_page_overwrites"] != float64(0) ||
		rep.Canary["missing_stores"] != float64(0) || rep.Bundle["canary_pages"] != float64(n) {
		t.Fatalf("json: %s", out)
	}
}

func TestCanaryReportBundleOverwrite(t *testing.T) {
	bad := cleanReplay(77)
	bad.Changed = append(bad.Changed, hook.PageChange{Page: 33, Owner: "req-2\x1b[31m", Before: 9, After: 10})
	bad.Running = append(bad.Running, "req-2\x1b[31m")
	missing := cleanReplay(78)
	missing.Changed = missing.Changed[:2] // page 20's store did not land
	path := writeCanaryBundle(t, []hook.CanaryPages{cleanReplay(76), bad, missing})
	out, _, err := runCanaryReport(t, path, true, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("exit %d (%v), want 1\n%s", cmdutil.ExitCode(err), err, out)
	}
	assertGolden(t, "canary-report-overwrite", out, nil)
	if pipe, _, _ := runCanaryReport(t, path, false, false); pipe != out {
		t.Errorf("the report in a pipe differs from the one on a terminal:\n%s", pipe)
	}
	if !strings.HasPrefix(out, "LIVE-PAGE-OVERWRITE hits: 1 in 3 replays") || !strings.Contains(out, "MISSING STORES: 1") {
		t.Fatalf("report:\n%s", out)
	}
	if strings.Contains(out, "\x1b") || !strings.Contains(out, `"req-2\x1b[31m"`) {
		t.Fatalf("untrusted owner not quoted:\n%q", out)
	}
	// The sample lines name the victim page and step.
	row := regexp.MustCompile(`(?m)^77 +33 +LIVE-PAGE-OVERWRITE +"req-2\\x1b\[31m" +0x0000000000000009 +0x000000000000000a$`)
	if !row.MatchString(out) {
		t.Fatalf("sample row (step 77, page 33, victim, before, after) missing:\n%s", out)
	}
	js, _, err := runCanaryReport(t, path, false, true)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("json exit %d", cmdutil.ExitCode(err))
	}
	var rep CanaryReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.FindingsTotal != 2 || rep.Findings[0].Evidence["step"] != "77" || rep.Findings[0].Evidence["page"] != "33" ||
		rep.Findings[1].Evidence["class"] != "missing-store" || rep.Findings[1].Evidence["page"] != "20" {
		t.Fatalf("findings %+v", rep.Findings)
	}
}

func TestCanaryReportBundleWithoutCanary(t *testing.T) {
	// A bundle of replays without the canary: no data, not a question.
	path := writeCanaryBundle(t, nil)
	out, _, err := runCanaryReport(t, path, false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitNoData || !strings.HasPrefix(out, "no data: "+path+" holds no canary.pages events or kv_canary violation lines (1 event read): ") {
		t.Fatalf("exit %d (%v)\n%s", cmdutil.ExitCode(err), err, out)
	}
}

func TestCanaryReportLog(t *testing.T) {
	out, errOut, err := runCanaryReport(t, filepath.Join("..", "..", "canary", "testdata", "sglang-canary.log"), false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("exit %d (%v)", cmdutil.ExitCode(err), err)
	}
	if !strings.HasPrefix(out, "SGLang kv_canary violations: 2 in 13 lines of ") || !regexp.MustCompile(`(?m)^3 +5120 +HEAD_K_FULL +chain_hash\+real_kv_hash +4113`).MatchString(out) {
		t.Fatalf("report:\n%s", out)
	}
	if !strings.Contains(errOut, "sglang-canary.log:13: ") {
		t.Fatalf("malformed line not reported on stderr: %q", errOut)
	}

	// A log whose only canary line is malformed: exit 3.
	p := filepath.Join(t.TempDir(), "bad.log")
	line := "I kv_canary violation: launch_tag=X fail_reason=none slot_idx=1 position=2 stored_token=3 expected_token=4 stored_chain_hash=0xz expected_aux=0x0\n"
	if err := os.WriteFile(p, []byte("hello\n"+line), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, err = runCanaryReport(t, p, false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(errOut, "bad.log:2: ") {
		t.Fatalf("exit %d err %v stderr %q", cmdutil.ExitCode(err), err, errOut)
	}

	// A clean log of a server that ran the canary: exit 0.
	if err := os.WriteFile(p, []byte("[2026-11-29 08:00:00] server_args=ServerArgs(model_path='m', kv_canary='log', kv_canary_sweep_interval=800)\nworld\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCanaryReport(t, p, false, true)
	if err != nil || !strings.Contains(out, `"violations": 0`) || !strings.Contains(out, `"format": "sglang-log"`) || !strings.Contains(out, `"kv_canary": "log"`) {
		t.Fatalf("%v\n%s", err, out)
	}
	out, _, err = runCanaryReport(t, p, false, false)
	if err != nil || out != "SGLang kv_canary violations: 0 in 2 lines of "+p+"\nSGLang ran with --kv-canary log (server_args)\n" {
		t.Fatalf("%v\n%q", err, out)
	}

	// Without violations and without the canary on, silence is no data.
	for _, c := range []struct{ name, body, detail string }{
		{"no server_args", "hello\nworld\n", "no server_args line in it says SGLang ran with --kv-canary log or raise"},
		{"canary off", "[2026-11-29 08:00:00] server_args=ServerArgs(model_path='m', kv_canary='none')\nworld\n", "its server_args say kv_canary=none"},
		{"other key", "x enable_kv_canary='log' kv_canary_sweep_interval=800\n", "no server_args line"},
	} {
		if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		out, _, err = runCanaryReport(t, p, false, false)
		if cmdutil.ExitCode(err) != cmdutil.ExitNoData || !strings.HasPrefix(out, "no data: "+p+" holds no canary.pages events or kv_canary violation lines (") ||
			!strings.Contains(out, "\n"+c.detail) {
			t.Errorf("%s: exit %d (%v)\n%s", c.name, cmdutil.ExitCode(err), err, out)
		}
	}
}

// The kv_canary mode is found wherever the reads cut the log.
func TestCanaryKVCanaryArgAcrossReads(t *testing.T) {
	line := strings.Repeat("x", 100) + " server_args=ServerArgs(a=1, kv_canary='raise', b=2)\n" + strings.Repeat("y", 50) + "\n"
	for _, chunk := range []int{1, 2, 7, 13, 64, 4096} {
		k := &kvCanaryArg{r: &chunkReader{s: line, n: chunk}}
		if _, err := io.Copy(io.Discard, k); err != nil {
			t.Fatal(err)
		}
		if k.value != "raise" {
			t.Errorf("reads of %d bytes: value %q", chunk, k.value)
		}
	}
}

// chunkReader returns s n bytes per Read.
type chunkReader struct {
	s string
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[n:]
	return n, nil
}

func TestCanaryReportUnreadable(t *testing.T) {
	_, _, err := runCanaryReport(t, filepath.Join(t.TempDir(), "missing"), false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput {
		t.Fatalf("missing file: exit %d", cmdutil.ExitCode(err))
	}
	// zstd magic but not a bundle.
	p := filepath.Join(t.TempDir(), "x.kvtrace")
	if err := os.WriteFile(p, []byte{0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3}, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = runCanaryReport(t, p, false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput {
		t.Fatalf("broken bundle: exit %d (%v)", cmdutil.ExitCode(err), err)
	}
	// A directory cannot be read as a log.
	_, _, err = runCanaryReport(t, t.TempDir(), false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput {
		t.Fatalf("directory: exit %d (%v)", cmdutil.ExitCode(err), err)
	}
}

func TestCanaryFormatting(t *testing.T) {
	for f, want := range map[float64]string{1: "100%", 0: "0%", 0.04: "4%", 0.0312: "3.1%", 0.00001: "<0.1%", 0.99999: ">99.9%"} {
		if got := canaryPercent(f); got != want {
			t.Errorf("percent(%v) = %q, want %q", f, got, want)
		}
	}
}

// betweenCheck is a between-phase check (canary/SPEC.md §7) before replay
// step: req-1's move landed on its page 10; nothing else changed.
func betweenCheck(step uint64) hook.CanaryPages {
	return hook.CanaryPages{
		Phase: "between", Step: step, Policy: "live", PagesTotal: 1000, PagesChecked: 40, LivePages: 36, LiveChecked: 36, SlotChecked: true,
		Expected: []uint32{10}, ExpectedOwner: []string{"req-1"}, Running: []string{"req-1", "req-2"},
		Changed: []hook.PageChange{{Page: 10, Owner: "req-1", Before: 4, After: 11}},
	}
}

// TestCanaryReportBetween: between-phase checks get their own headline,
// counters and samples; a live overwrite found between replays names its
// victim with phase "between" and makes the report exit 1, while the replay
// headline stays at zero.
func TestCanaryReportBetween(t *testing.T) {
	clean := writeCanaryBundle(t, []hook.CanaryPages{cleanReplay(1), betweenCheck(2), cleanReplay(2)})
	out, _, err := runCanaryReport(t, clean, false, false)
	if err != nil {
		t.Fatalf("clean: %v\n%s", err, out)
	}
	if !strings.HasPrefix(out, "LIVE-PAGE-OVERWRITE hits: 0 in 2 replays") ||
		!strings.Contains(out, "\nbetween replays: LIVE-PAGE-OVERWRITE hits: 0 in 1 checks (live coverage 100%)\n") ||
		!strings.Contains(out, "slot by slot in every check") {
		t.Fatalf("clean report:\n%s", out)
	}

	bad := betweenCheck(3)
	bad.Changed = append(bad.Changed, hook.PageChange{Page: 33, Owner: "req-2", Before: 9, After: 10})
	miss := betweenCheck(4)
	miss.Changed = nil // req-1's move did not land
	path := writeCanaryBundle(t, []hook.CanaryPages{cleanReplay(2), bad, cleanReplay(3), miss, cleanReplay(4)})
	out, _, err = runCanaryReport(t, path, false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("exit %d (%v), want 1\n%s", cmdutil.ExitCode(err), err, out)
	}
	if !strings.HasPrefix(out, "LIVE-PAGE-OVERWRITE hits: 0 in 3 replays") ||
		!strings.Contains(out, "between replays: LIVE-PAGE-OVERWRITE hits: 1 in 2 checks") ||
		!strings.Contains(out, "MISSING STORES between replays: 1") {
		t.Fatalf("report:\n%s", out)
	}
	row := regexp.MustCompile(`(?m)^3 +33 +LIVE-PAGE-OVERWRITE +req-2 +0x0000000000000009 +0x000000000000000a$`)
	if !row.MatchString(out) {
		t.Fatalf("between sample row (step 3, page 33, victim) missing:\n%s", out)
	}
	js, _, err := runCanaryReport(t, path, false, true)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("json exit %d", cmdutil.ExitCode(err))
	}
	var rep struct {
		Canary struct {
			Replays            uint64 `json:"replays"`
			LivePageOverwrites uint64 `json:"live_page_overwrites"`
			BetweenChecks      uint64 `json:"between_checks"`
			Between            struct {
				LivePageOverwrites uint64 `json:"live_page_overwrites"`
				MissingStores      uint64 `json:"missing_stores"`
				ExpectedWrites     uint64 `json:"expected_writes"`
			} `json:"between"`
		} `json:"canary"`
		Findings []*hook.Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	c := rep.Canary
	if c.Replays != 3 || c.LivePageOverwrites != 0 || c.BetweenChecks != 2 || c.Between.LivePageOverwrites != 1 ||
		c.Between.MissingStores != 1 || c.Between.ExpectedWrites != 1 {
		t.Fatalf("json canary: %s", js)
	}
	if len(rep.Findings) != 2 || rep.Findings[0].Evidence["phase"] != "between" || rep.Findings[0].Evidence["victim"] != "req-2" ||
		rep.Findings[1].Evidence["phase"] != "between" || rep.Findings[1].Evidence["class"] != "missing-store" {
		t.Fatalf("findings: %s", js)
	}

	// A bundle without between checks says so.
	old := writeCanaryBundle(t, []hook.CanaryPages{cleanReplay(1)})
	out, _, _ = runCanaryReport(t, old, false, false)
	if !strings.Contains(out, `between replays: not checked (no phase "between" events)`) {
		t.Fatalf("no between checks:\n%s", out)
	}
}

// A producer that reported its canary switched off: the report names it,
// says the verdict is partial (text and --json) and exits 4, not 0; a
// finding still exits 1. A run.end that lost nothing changes nothing.
func TestCanaryReportBundlePartial(t *testing.T) {
	clean := cleanReplay(1)
	evs := []hook.Event{
		{Kind: hook.KindCanaryPages, Body: &clean},
		{Kind: hook.KindRunEnd, Src: hook.Source{Proc: "python3", PID: 11, Role: "prefill"}, Body: &hook.RunEnd{}},
		{Kind: hook.KindRunEnd, Src: hook.Source{Proc: "python3", PID: 12, Role: "decode", Rank: 1},
			Body: &hook.RunEnd{Error: "canary.replay off: 3 errors at X; 3 instrument errors"}},
	}
	path := writeBundle(t, traces.Manifest{Run: "t"}, evs...)
	out, _, err := runCanaryReport(t, path, false, false)
	if code := cmdutil.ExitCode(err); code != cmdutil.ExitNoData {
		t.Fatalf("exit %d (%v), want 4", code, err)
	}
	if !strings.Contains(out, "PARTIAL:") || !strings.Contains(out, "python3 pid 12 (decode rank 1): canary.replay off") {
		t.Fatalf("no partial line:\n%s", out)
	}
	out, _, _ = runCanaryReport(t, path, false, true)
	var rep CanaryReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Status != StatusPartial || len(rep.Partial) != 1 || rep.Coverage == nil || rep.Coverage.Lossy != 1 {
		t.Fatalf("json: %s", out)
	}
	// Nothing lost: clean, exit 0.
	path = writeBundle(t, traces.Manifest{Run: "t"}, evs[:2]...)
	if out, _, err := runCanaryReport(t, path, false, false); err != nil || strings.Contains(out, "PARTIAL") {
		t.Fatalf("exit %v:\n%s", err, out)
	}
}

// --limit sets how many samples of each page class a bundle's report keeps
// and lists, text and --json; the class counts stay whole.
func TestCanaryReportLimit(t *testing.T) {
	var replays []hook.CanaryPages
	for i := range 5 {
		replays = append(replays, cleanReplay(uint64(70+i)))
	}
	path := writeCanaryBundle(t, replays)
	for _, tc := range []struct {
		args []string
		want int // expected-store samples (3 expected stores a replay)
	}{{nil, canary.DefaultSamplesPerClass}, {[]string{"--limit", "2"}, 2}, {[]string{"--limit", "40"}, 15}} {
		out, _, err := runCmd(NewCmdCanary, append([]string{"report", path, "--json"}, tc.args...)...)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		var rep CanaryReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range rep.Canary.Samples {
			if s.Class == canary.ClassExpectedStore.String() {
				n++
			}
		}
		if n != tc.want || rep.Canary.ExpectedWrites != 15 {
			t.Errorf("%q: %d expected-store samples (want %d), %d expected writes (want 15)", tc.args, n, tc.want, rep.Canary.ExpectedWrites)
		}
		text, _, _ := runCmd(NewCmdCanary, append([]string{"report", path}, tc.args...)...)
		if rows := strings.Count(text, " expected-store "); rows != tc.want { // sample rows (the class table's starts its line)
			t.Errorf("%q: %d expected-store rows, want %d:\n%s", tc.args, rows, tc.want, text)
		}
	}
}
