package main

import (
	"bufio"
	"bytes"
	"encoding/json"
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
	path := filepath.Join(t.TempDir(), "run.kvtrace")
	w, err := traces.Create(path, traces.Manifest{
		Tool: "kvcanary test", Run: "r-1", Created: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC),
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
			ev = hook.Event{Kind: hook.KindSession, TS: int64(1000 + i), Body: &hook.Session{ID: "s", Outcome: hook.OutcomeDone}}
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
	if ran, err := parseCmd(NewCmdTraceCat); ran != nil || cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Fatalf("no file: %v", err)
	}
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
