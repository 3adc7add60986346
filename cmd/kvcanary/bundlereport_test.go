package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// A recorded finding is not fed back: the analyzer judges the run afresh, so
// a bundle recorded with findings reports each once.
func TestReplayBundleRejudges(t *testing.T) {
	bad := cleanReplay(5)
	bad.Changed = append(bad.Changed, hook.PageChange{Page: 33, Owner: "req-2", Before: 9, After: 10})
	recorded := canary.LiveOverwriteFinding(5, "live", bad.Changed[len(bad.Changed)-1])
	path := writeGraphDiffBundle(t, hook.RunConfig{Engine: "sim", CUDAGraph: hook.Bool(true)}, []hook.Event{
		{Kind: hook.KindCanaryPages, Body: &bad},
		{Kind: hook.KindFinding, Body: recorded},
	})
	br, err := replayBundle(mustOpenBundle(t, path), canary.NewAnalyzer(canary.Options{}), 1)
	if err != nil {
		t.Fatal(err)
	}
	if br.events != 3 || br.kinds[hook.KindCanaryPages] != 1 || br.kinds[hook.KindFinding] != 1 {
		t.Errorf("read %d events, kinds canary.pages=%d finding=%d; want 3, 1, 1", br.events, br.kinds[hook.KindCanaryPages], br.kinds[hook.KindFinding])
	}
	if br.findingsTotal != 1 || len(br.findings) != 1 || br.findings[0].Evidence["page"] != "33" {
		t.Errorf("findings %d %+v; want the one live overwrite, judged once", br.findingsTotal, br.findings)
	}
	if br.truncated || br.skipped != 0 {
		t.Errorf("intact bundle: truncated=%v skipped=%d", br.truncated, br.skipped)
	}
}

// The cap keeps the first findings and counts them all.
func TestReplayBundleFindingCap(t *testing.T) {
	var rs []hook.CanaryPages
	for s := range uint64(3) {
		r := cleanReplay(s)
		r.Changed = r.Changed[:2] // page 20's store did not land: one missing store per replay
		rs = append(rs, r)
	}
	br, err := replayBundle(mustOpenBundle(t, writeCanaryBundle(t, rs)), canary.NewAnalyzer(canary.Options{}), 2)
	if err != nil {
		t.Fatal(err)
	}
	if br.findingsTotal != 3 || len(br.findings) != 2 || br.findings[1].Evidence["step"] != "1" {
		t.Errorf("findings total %d kept %d (%+v); want 3 counted, the first 2 kept", br.findingsTotal, len(br.findings), br.findings)
	}
}

// A bundle cut short is reported on what was readable, with a warning on
// stderr, by every report that reads bundles.
func TestBundleReportsWarnTruncation(t *testing.T) {
	var rs []hook.CanaryPages
	for s := range uint64(50) {
		rs = append(rs, cleanReplay(s))
	}
	cpath := writeCanaryBundle(t, rs)
	gpath := writeGraphDiffBundle(t, hook.RunConfig{CUDAGraph: hook.Bool(true)}, []hook.Event{gdSample(1, "r1", "s1", []float32{0, 1, 2, 3, 4, 5, 6, 7})})
	for _, p := range []string{cpath, gpath} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, fi.Size()-3); err != nil { // cuts into the footer's frame
			t.Fatal(err)
		}
	}
	_, errOut, err := runCanaryReport(t, cpath, false, false)
	if err != nil || !strings.Contains(errOut, "warning: "+cpath+" is truncated (") {
		t.Errorf("canary report of a truncated bundle: err %v, stderr %q", err, errOut)
	}
	_, errOut, err = runGraphDiffReport(t, gpath, false, false)
	if err != nil || !strings.Contains(errOut, "warning: "+gpath+" is truncated (") {
		t.Errorf("graphdiff report of a truncated bundle: err %v, stderr %q", err, errOut)
	}
	// The graphdiff analyzer judged the run start the bundle kept.
	an := graphdiff.NewAnalyzer(graphdiff.Options{})
	if _, err := replayBundle(mustOpenBundle(t, gpath), an, 0); err != nil {
		t.Fatal(err)
	}
	if res := an.Result(); res.Samples != 1 {
		t.Errorf("samples %d, want 1", res.Samples)
	}
	if _, err := openBundle(context.Background(), gpath+".missing"); cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), gpath+".missing") {
		t.Errorf("missing bundle: exit %d, %v; want 3 naming the file", cmdutil.ExitCode(err), err)
	}
}

func mustOpenBundle(t *testing.T, path string) *bundleFile {
	t.Helper()
	b, err := openBundle(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
