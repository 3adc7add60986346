package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/demo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

func TestDemoFlags(t *testing.T) {
	got := mustParse(t, NewCmdDemo, "--seed", "3", "--out", "x")
	if got.Sessions != 80 || got.Rounds != 4 || got.Seed != 3 || got.Out != "x" {
		t.Fatalf("options %+v", got)
	}
	if got, err := parseCmd(NewCmdDemo, "--keep"); err != nil || !got.Keep || got.Out != "" {
		t.Fatalf("--keep: %v %+v", err, got)
	}
	wantUsage(t, NewCmdDemo, "--sessions", "0")
}

// TestDemoPlainOutput runs a tiny demo: plain numbered steps on a non-TTY,
// nothing on stderr, the verdict and bundle directory at the end.
func TestDemoPlainOutput(t *testing.T) {
	ios, _, out, errOut := cmdutil.Test()
	dir := t.TempDir()
	opts := &DemoOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Ctx: context.Background(), Now: time.Now},
		JSON: &cmdutil.JSONFlags{}, Sessions: 2, Rounds: 1, Seed: 1, Out: dir}
	if err := demoRun(opts); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	wantContains(t, "output", s, "1. baseline", "CORRUPTION sessions:", "2. transfer", "3. persistent buffer", "4. transient compute",
		"5. A/B --index-k-dtype fp8", "8. A/B --multi-stream-overlap=false", "VERDICT: ", "bundles: "+dir, "wall: ",
		"kvcanary checksum compare "+dir+"/baseline.kvtrace", "kvcanary graphdiff report "+dir+"/baseline.kvtrace",
		"kvcanary ab "+dir+"/baseline.kvtrace "+dir+"/ab-overlap-off.kvtrace", dir+"/ab-index-k-fp8.kvtrace")
	if errOut.Len() != 0 {
		t.Errorf("stderr on a non-TTY: %q", errOut)
	}
}

// TestDemoTempBundles: without --out the bundles go to a temporary directory
// that is removed at the end (and the report says so); --keep keeps it and
// prints the re-check commands.
func TestDemoTempBundles(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	for _, keep := range []bool{false, true} {
		ios, _, out, _ := cmdutil.Test()
		opts := &DemoOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Ctx: context.Background(), Now: time.Now},
			JSON: &cmdutil.JSONFlags{}, Sessions: 2, Rounds: 1, Seed: 1, Keep: keep}
		if err := demoRun(opts); err != nil {
			t.Fatal(err)
		}
		left, _ := filepath.Glob(filepath.Join(tmp, "kvcanary-demo-*", "*.kvtrace"))
		switch {
		case !keep && (len(left) != 0 || !strings.Contains(out.String(), "bundles: removed")):
			t.Fatalf("without --out or --keep: %d bundles left in %s; output:\n%s", len(left), tmp, out)
		case keep && (len(left) != 5 || !strings.Contains(out.String(), "kvcanary canary report "+filepath.Dir(left[0]))):
			t.Fatalf("--keep: bundles %v; output:\n%s", left, out)
		}
	}
}

// The verdict prints a sentence (or workaround) a line under its label; a
// verdict of one sentence prints its Result.
func TestDemoVerdictLines(t *testing.T) {
	var b strings.Builder
	writeDemoStep(&b, 9, &demo.StepResult{Step: demo.StepVerdict, Result: "cause: x. y removes it.", Lines: []string{"cause: x.", "y removes it."}})
	if got, want := b.String(), "\nVERDICT: cause: x.\n         y removes it.\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	b.Reset()
	writeDemoStep(&b, 9, &demo.StepResult{Step: demo.StepVerdict, Result: "nothing to localize"})
	if got, want := b.String(), "\nVERDICT: nothing to localize\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
