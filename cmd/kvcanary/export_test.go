package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

func TestTraceExportFlags(t *testing.T) {
	got, err := parseCmd(NewCmdTraceExport, "x.kvtrace", "--format", "perfetto", "-o", "run.json")
	if err != nil || got.Path != "x.kvtrace" || got.Out != "run.json" || got.Format != "perfetto" {
		t.Fatalf("options %+v, %v", got, err)
	}
	if _, err := parseCmd(NewCmdTraceExport, "x.kvtrace", "--format", "pprof"); cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Errorf("--format pprof: %v, want a usage error", err)
	}
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
	for _, want := range []string{"0 of 20 sessions corrupted", "not measured: the bundle holds no room.checksum events", "kvcanary report " + bundle} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
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
