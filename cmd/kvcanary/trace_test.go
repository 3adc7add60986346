package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// writeTraceBundle writes a bundle of n replay events and n/2 session events
// and returns its path and the offset where its last frame starts.
func writeTraceBundle(t *testing.T, n int) string {
	t.Helper()
	return writeTraceBundleCreated(t, n, time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
}

// writeTraceBundleCreated is writeTraceBundle with the manifest's created
// time: another recording of the same run (another host's, say).
func writeTraceBundleCreated(t *testing.T, n int, created time.Time) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.kvtrace")
	w, err := traces.Create(path, traces.Manifest{
		Tool: "kvcanary test", Run: "r-1", Created: created,
		Host:   hook.HostInfo{Hostname: "gpu-7\x1b[31m", OS: "linux", Arch: "amd64", CPUs: 8},
		Config: hook.RunConfig{Engine: "sim", CUDAGraph: hook.Bool(true), Seed: 3},
		Labels: map[string]string{"exp": "a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		ev := hook.Event{Kind: hook.KindReplay, TS: int64(1000 + i), Body: &hook.Replay{Step: uint64(i), Mode: "graph"}}
		if i%2 == 1 {
			ev = hook.Event{Kind: hook.KindSession, TS: int64(1000 + i), Body: &hook.Session{ID: fmt.Sprintf("s%03d", i), Outcome: hook.OutcomeDone}}
		}
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTraceFlags(t *testing.T) {
	ins, err := parseCmd(NewCmdTraceInspect, "x.kvtrace", "--json")
	if err != nil || ins.Path != "x.kvtrace" || !ins.JSON.JSON {
		t.Fatalf("inspect options %+v, %v", ins, err)
	}
	var cat *TraceCatOptions
	if cat, err = parseCmd(NewCmdTraceCat, "x.kvtrace", "--kind", "replay", "--kind", "session,gpu", "--all"); err != nil || cat.Path != "x.kvtrace" || !cat.All || strings.Join(cat.Kinds, " ") != "replay session gpu" {
		t.Fatalf("cat options %+v, %v", cat, err)
	}
	wantUsage(t, NewCmdTraceCat) // no file
}

func TestTraceInspect(t *testing.T) {
	path := writeTraceBundle(t, 10)
	for _, tty := range []bool{false, true} {
		ios, _, out, errOut := cmdutil.Test()
		ios.SetTTY(tty, tty)
		if err := traceInspectRun(&TraceInspectOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Path: path}); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		for _, want := range []string{"format     1.0", "events     10 over 9ns", "  replay   5", "  session  5", "truncated  no", "footer     yes", `"gpu-7\x1b[31m"`, "exp=a"} {
			if !strings.Contains(text, want) {
				t.Errorf("tty=%v: output lacks %q:\n%s", tty, want, text)
			}
		}
		if strings.Contains(text, "\x1b") || errOut.Len() != 0 {
			t.Errorf("raw escape in output or unexpected stderr %q", errOut)
		}
	}
	ios, _, out, _ := cmdutil.Test()
	if err := traceInspectRun(&TraceInspectOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: true}, Path: path}); err != nil {
		t.Fatal(err)
	}
	var s struct {
		FormatVersion string            `json:"format_version"`
		Events        int               `json:"events"`
		Counts        map[string]int    `json:"counts"`
		Truncated     *bool             `json:"truncated"`
		FirstTS       int64             `json:"first_ts_ns"`
		LastTS        int64             `json:"last_ts_ns"`
		Manifest      map[string]any    `json:"manifest"`
		Footer        map[string]any    `json:"footer"`
		Extra         map[string]string `json:"-"`
	}
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.FormatVersion != "1.0" || s.Events != 10 || s.Counts["replay"] != 5 || s.Counts["session"] != 5 || s.Truncated == nil || *s.Truncated || s.FirstTS != 1000 || s.LastTS != 1009 || s.Manifest["run"] != "r-1" || s.Footer == nil {
		t.Errorf("inspect --json = %s", out)
	}
}

func TestTraceInspectTruncated(t *testing.T) {
	path := writeTraceBundle(t, 10)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)-5], 0o644); err != nil { // cut the footer frame
		t.Fatal(err)
	}
	ios, _, out, errOut := cmdutil.Test()
	if err := traceInspectRun(&TraceInspectOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: true}, Path: path}); err != nil {
		t.Fatalf("truncated bundle is readable, want exit 0: %v", err)
	}
	if !strings.Contains(errOut.String(), "warning: "+path+" is truncated (file ends inside frame") {
		t.Errorf("stderr = %q", errOut)
	}
	var s traces.Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if !s.Truncated || s.Events != 10 || s.HasFooter {
		t.Errorf("summary %+v", s)
	}
}

func TestTraceInputErrors(t *testing.T) {
	dir := t.TempDir()
	notZstd := filepath.Join(dir, "notes.txt")
	os.WriteFile(notZstd, []byte("hello\n"), 0o644)
	for _, path := range []string{notZstd, filepath.Join(dir, "missing.kvtrace")} {
		ios, _, _, _ := cmdutil.Test()
		err := traceInspectRun(&TraceInspectOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Path: path})
		if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), path) {
			t.Errorf("inspect %s: %v (exit %d), want exit 3 naming the file", path, err, cmdutil.ExitCode(err))
		}
		err = traceCatRun(&TraceCatOptions{IO: ios, Path: path})
		if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), path) {
			t.Errorf("cat %s: %v (exit %d), want exit 3 naming the file", path, err, cmdutil.ExitCode(err))
		}
	}
	ios, _, _, _ := cmdutil.Test()
	err := traceCatRun(&TraceCatOptions{IO: ios, Path: writeTraceBundle(t, 1), Kinds: []string{"bogus"}})
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown --kind: %v", err)
	}
}

func TestTraceCat(t *testing.T) {
	path := writeTraceBundle(t, 10)
	lines := func(o *TraceCatOptions) []string {
		t.Helper()
		ios, _, out, errOut := cmdutil.Test()
		o.IO = ios
		o.Path = path
		if err := traceCatRun(o); err != nil {
			t.Fatal(err)
		}
		if errOut.Len() != 0 {
			t.Errorf("stderr %q", errOut)
		}
		var ls []string
		sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
		for sc.Scan() {
			if !json.Valid(sc.Bytes()) {
				t.Errorf("not JSON: %s", sc.Text())
			}
			ls = append(ls, sc.Text())
		}
		return ls
	}
	all := lines(&TraceCatOptions{})
	if len(all) != 10 {
		t.Fatalf("cat printed %d lines, want 10", len(all))
	}
	var ev hook.Event
	if err := ev.UnmarshalJSON([]byte(all[3])); err != nil || ev.Kind != hook.KindSession || ev.TS != 1003 {
		t.Errorf("line 4 = %s (%v)", all[3], err)
	}
	if got := lines(&TraceCatOptions{Kinds: []string{"session"}}); len(got) != 5 || !strings.Contains(got[0], `"kind":"session"`) {
		t.Errorf("--kind session: %v", got)
	}
	if got := lines(&TraceCatOptions{Kinds: []string{"gpu"}}); len(got) != 0 {
		t.Errorf("--kind gpu: %v", got)
	}
	withAll := lines(&TraceCatOptions{All: true})
	if len(withAll) != 12 || !strings.HasPrefix(withAll[0], `{"kvtrace":{"format_version":"1.0"`) || !strings.HasPrefix(withAll[11], `{"kvtrace_footer":{"events":10`) {
		t.Errorf("--all: first %q last %q (%d lines)", withAll[0], withAll[len(withAll)-1], len(withAll))
	}
}

func mergeInput(t *testing.T, p string, m traces.Manifest) string {
	t.Helper()
	w, err := traces.Create(p, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(hook.Event{Kind: hook.KindRunEnd, TS: 1, Body: &hook.RunEnd{WallNS: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// An interrupted merge leaves nothing at OUT (nor its temporary file): a
// bundle there would look complete, footer and all.
func TestTraceMergeInterruptedLeavesNoBundle(t *testing.T) {
	dir := t.TempDir()
	a := mergeInput(t, filepath.Join(dir, "a.kvtrace"), traces.Manifest{Run: "a"})
	b := mergeInput(t, filepath.Join(dir, "b.kvtrace"), traces.Manifest{Run: "b"})
	out := filepath.Join(dir, "all.kvtrace")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ios, _, _, _ := cmdutil.Test()
	err := traceMergeRun(&TraceMergeOptions{IO: ios, Ctx: ctx, JSON: &cmdutil.JSONFlags{}, Paths: []string{a, b}, Out: out, Window: 16})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted merge: %v, want context.Canceled", err)
	}
	for _, p := range []string{out, out + ".tmp"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after an interrupted merge: %v, want it absent", p, err)
		}
	}
	// A completed merge is at OUT, and its temporary file is gone.
	if err := traceMergeRun(&TraceMergeOptions{IO: ios, Ctx: context.Background(), JSON: &cmdutil.JSONFlags{}, Paths: []string{a, b}, Out: out, Window: 16}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("completed merge: %v", err)
	}
	if _, err := os.Stat(out + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
}

// An input whose manifest has no start time: its offset is printed as
// unknown (not 0), and --align start refuses it by name.
func TestTraceMergeUnknownOffset(t *testing.T) {
	dir := t.TempDir()
	a := mergeInput(t, filepath.Join(dir, "a.kvtrace"), traces.Manifest{Run: "a", Created: time.Now()})
	// b: its manifest frame damaged (one flipped byte), so its start time
	// is unknown; its event frame still reads.
	good, err := os.ReadFile(mergeInput(t, filepath.Join(dir, "good.kvtrace"), traces.Manifest{Run: "b", Created: time.Now()}))
	if err != nil {
		t.Fatal(err)
	}
	b := filepath.Join(dir, "b.kvtrace")
	damaged := false
	for at := 6; at < len(good) && !damaged; at++ {
		bad := append([]byte(nil), good...)
		bad[at] ^= 0x40
		if err := os.WriteFile(b, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if r, err := traces.Open(b); err == nil {
			damaged = r.ManifestDamage() != "" && r.Manifest().Created.IsZero()
			r.Close()
		}
	}
	if !damaged {
		t.Fatal("no flipped byte damaged the manifest frame")
	}
	out := filepath.Join(dir, "all.kvtrace")
	ios, _, stdout, _ := cmdutil.Test()
	if err := traceMergeRun(&TraceMergeOptions{IO: ios, Ctx: context.Background(), JSON: &cmdutil.JSONFlags{}, Paths: []string{a, b}, Out: out, Window: 16}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(stdout.String(), "\n")
	var bl string
	for _, l := range lines {
		if strings.Contains(l, "b.kvtrace") {
			bl = l
		}
	}
	if f := strings.Fields(bl); len(f) < 6 || f[4] != "unknown" || f[5] != "unknown" {
		t.Errorf("b's row %q: want its start and offset unknown\n%s", bl, stdout)
	}
	err = traceMergeRun(&TraceMergeOptions{IO: ios, Ctx: context.Background(), JSON: &cmdutil.JSONFlags{}, Paths: []string{a, b}, Out: out + "2", Window: 16, Align: true})
	if err == nil || !strings.Contains(err.Error(), "b.kvtrace") || !strings.Contains(err.Error(), "unknown") {
		t.Errorf("--align start with an unknown offset: %v, want a refusal naming b.kvtrace", err)
	}
}

// TestTraceInspectMergedDropsUnknown: a merge with an input that lost its
// footer cannot count that input's drops; trace inspect says the merged
// count is a lower bound.
func TestTraceInspectMergedDropsUnknown(t *testing.T) {
	a := writeTraceBundle(t, 40)
	// Another host's recording (a copy of a would be refused: issue 27 D8).
	b, err := os.ReadFile(writeTraceBundleCreated(t, 40, time.Date(2026, 11, 29, 9, 0, 1, 0, time.UTC)))
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.kvtrace")
	if err := os.WriteFile(cut, b[:len(b)-40], 0o600); err != nil { // the footer frame cut off
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "all.kvtrace")
	ios, _, _, _ := cmdutil.Test()
	merge := NewCmdTraceMerge(&cmdutil.Factory{IO: ios}, nil)
	merge.SetArgs([]string{a, cut, "-o", out})
	if err := merge.Execute(); err != nil {
		t.Fatalf("merge: %v", err)
	}
	ios, _, stdout, _ := cmdutil.Test()
	inspect := NewCmdTraceInspect(&cmdutil.Factory{IO: ios}, nil)
	inspect.SetArgs([]string{out})
	if err := inspect.Execute(); err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if !strings.Contains(stdout.String(), "at least 0 dropped before the writer (an input of the merge had no footer)") {
		t.Fatalf("inspect of a merge with a footerless input:\n%s", stdout)
	}
}

// hostile holds an xterm CSI introducer (U+009B) and bidi overrides and
// isolates, as a model's output or a log line might.
const hostile = "out\u009b31mput \u202egnp.exe\u202c \u2067iso\u2069"

func hostileBundle(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "h.kvtrace")
	w, err := traces.Create(path, traces.Manifest{Run: "r-" + hostile, Config: hook.RunConfig{Engine: "sim"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(hook.Event{Kind: hook.KindSession, TS: 1, Body: &hook.Session{ID: hostile, Outcome: hook.OutcomeLeak}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func assertEscaped(t *testing.T, what, out string) {
	t.Helper()
	for _, r := range out {
		if r >= 0x80 && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			t.Fatalf("%s passes %U through raw:\n%s", what, r, out)
		}
	}
	if !strings.Contains(out, `\u009b`) || !strings.Contains(out, `\u202e`) || !strings.Contains(out, `\u2067`) {
		t.Fatalf("%s lacks the \\u escapes:\n%s", what, out)
	}
}

// Issue 19 item 12: trace cat and --json reports escape C1 and bidi controls.
func TestTraceCatEscapesControls(t *testing.T) {
	path := hostileBundle(t)
	ios, _, out, _ := cmdutil.Test()
	if err := traceCatRun(&TraceCatOptions{IO: ios, Path: path, All: true}); err != nil {
		t.Fatal(err)
	}
	assertEscaped(t, "trace cat", out.String())

	ios, _, out, _ = cmdutil.Test()
	if err := traceInspectRun(&TraceInspectOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: true}, Path: path}); err != nil {
		t.Fatal(err)
	}
	assertEscaped(t, "trace inspect --json", out.String())
}

func TestTraceExportFlags(t *testing.T) {
	got, err := parseCmd(NewCmdTraceExport, "x.kvtrace", "--format", "perfetto", "-o", "run.json")
	if err != nil || got.Path != "x.kvtrace" || got.Out != "run.json" || got.Format != "perfetto" {
		t.Fatalf("options %+v, %v", got, err)
	}
	wantUsage(t, NewCmdTraceExport, "x.kvtrace", "--format", "pprof")
}

// export writes a timeline that decodes, one step slice per replay; a file
// that is not a bundle is an input error naming it.
func TestTraceExportRun(t *testing.T) {
	bundle := writeTraceBundle(t, 40)
	out := filepath.Join(t.TempDir(), "run.json")
	ios, _, _, stderr := cmdutil.Test()
	opts := &TraceExportOptions{IO: ios, Path: bundle, Format: "perfetto", Out: out, JSON: &cmdutil.JSONFlags{}}
	if err := traceExportRun(opts); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		TraceEvents []struct{ Ph, Cat string } `json:"traceEvents"`
	}
	if err := json.Unmarshal(raw, &tf); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	steps := 0
	for _, e := range tf.TraceEvents {
		if e.Ph == "X" && e.Cat == "step" {
			steps++
		}
	}
	if steps != 20 || !strings.Contains(stderr.String(), "20 steps") {
		t.Errorf("%d step slices, stderr %q; want 20", steps, stderr.String())
	}
	notBundle := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(notBundle, []byte("hello\n"), 0o644)
	opts.Path = notBundle
	if err := traceExportRun(opts); cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), "notes.txt") {
		t.Errorf("not a bundle: %v (exit %d), want exit 3 naming it", err, cmdutil.ExitCode(err))
	}
}

func TestReportRun(t *testing.T) {
	bundle := writeTraceBundle(t, 40)
	md, _, err := runCmd(NewCmdReport, bundle, "--format", "md")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "Markdown", md, "0 of 20 sessions corrupted", "not measured: the bundle holds no room.checksum events", "kvcanary report "+bundle)
	out := filepath.Join(t.TempDir(), "report.html")
	if _, _, err := runCmd(NewCmdReport, bundle, "-o", out); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(out); err != nil || !strings.Contains(string(b), `id="verdict-transfer"`) {
		t.Fatalf("report.html: %v", err)
	}
	if _, _, err := runCmd(NewCmdReport, bundle, "--format", "pdf"); cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Errorf("--format pdf: %v, want a usage error", err)
	}
}

// Without --format, report picks what its output can show: Markdown on a
// terminal (raw HTML is unreadable there; stderr says how to get the HTML)
// and in a .md file; HTML to a pipe, to -o - even on a terminal, and to
// other files. --format always wins.
func TestReportFormatFollowsTheOutput(t *testing.T) {
	bundle := writeTraceBundle(t, 40)
	dir := t.TempDir()
	const html, md = "<!DOCTYPE html>", "## kvcanary report\n"
	for _, tc := range []struct {
		name   string
		tty    bool
		args   []string
		file   string // the output file, "" for stdout
		want   string // the output's start
		stderr string // a substring of stderr, "" for none
	}{
		{"terminal", true, nil, "", md, "-o report.html writes the HTML report"},
		{"pipe", false, nil, "", html, ""},
		{"terminal, -o -", true, []string{"-o", "-"}, "", html, ""},
		{"terminal, --format html", true, []string{"--format", "html"}, "", html, ""},
		{"pipe, --format md", false, []string{"--format", "md"}, "", md, ""},
		{"file.md", true, []string{"-o", filepath.Join(dir, "r.md")}, filepath.Join(dir, "r.md"), md, "wrote"},
		{"file.html", true, []string{"-o", filepath.Join(dir, "r.html")}, filepath.Join(dir, "r.html"), html, "wrote"},
		{"file.md, --format html", false, []string{"-o", filepath.Join(dir, "f.md"), "--format", "html"}, filepath.Join(dir, "f.md"), html, "wrote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCLI()
			c.IO.SetTTY(tc.tty, tc.tty)
			if err := c.exec(NewCmdReport(c.F, nil), append([]string{bundle}, tc.args...)...); err != nil {
				t.Fatal(err)
			}
			got := c.Out.String()
			if tc.file != "" {
				b, err := os.ReadFile(tc.file)
				if err != nil {
					t.Fatal(err)
				}
				got = string(b)
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("output starts %q, want %q", got[:min(len(got), 40)], tc.want)
			}
			if tc.stderr == "" && c.ErrOut.Len() > 0 || !strings.Contains(c.ErrOut.String(), tc.stderr) {
				t.Errorf("stderr %q, want %q", c.ErrOut, tc.stderr)
			}
		})
	}
}
