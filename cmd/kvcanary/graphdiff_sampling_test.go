package main

import (
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// A bundle whose graph replays graph-vs-eager never sampled (a short run at
// the default rate) says how many there were and the flag that samples
// them, not only "record them with kvcanary wrap" (it was).
func TestGraphDiffReportSaysNoGraphReplayWasSampled(t *testing.T) {
	path := writeCanaryBundle(t, nil) // one graph replay, no graphdiff.sample
	ios, _, out, _ := cmdutil.Test()
	err := graphDiffReportRun(&GraphDiffReportOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Path: path})
	if cmdutil.ExitCode(err) != cmdutil.ExitNoData {
		t.Fatalf("exit %d, want 4 (no data)", cmdutil.ExitCode(err))
	}
	wantContains(t, "stdout", out.String(), "0 of 1 graph replay sampled: a run this short needs a denser rate, e.g. kvcanary wrap --graphdiff-every 1")
}
