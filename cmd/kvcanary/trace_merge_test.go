package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

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
	b, err := os.ReadFile(writeTraceBundle(t, 40))
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
