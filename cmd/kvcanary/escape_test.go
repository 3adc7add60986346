package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

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
