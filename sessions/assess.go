package sessions

import (
	"fmt"

	"github.com/kvcanary/kvcanary/spec/outcome"
)

// NoToolControlShare is the no_tool share of sessions at or above which a
// run's rate is not read as corruption without a control run: a model that
// skips tools (a weak model, a prompt it does not follow, sampling) looks
// the same as corrupted output, so the same workload on a configuration
// believed clean must be measured first. A quarter is above the corruption
// rates seen from the bugs kvcanary hunts (the seeds: 18% of sessions, leak
// and no_tool together).
const NoToolControlShare = 0.25

// Verdicts of Assess.
const (
	VerdictMeasured     = "measured"      // the rate can be read as the server's corruption rate
	VerdictServerFailed = "server_failed" // every session ended in error or timeout: no measurement
	VerdictNeedsControl = "needs_control" // no_tool share at or above NoToolControlShare
	VerdictServerLost   = "server_lost"   // the server went away mid-run (repro's harness stopped there)
)

// Assess says how a run's outcomes may be read: VerdictServerFailed when
// every session ended in error or timeout (the server failed; the rate
// says nothing about corruption), VerdictNeedsControl when no_tool reaches
// NoToolControlShare of the sessions, else VerdictMeasured; with a note for
// the first two.
func Assess(o outcome.Counts) (verdict, note string) {
	n := o.Total()
	switch {
	case n > 0 && o.Error+o.Timeout == n:
		return VerdictServerFailed, fmt.Sprintf("every session ended in error or timeout (error=%d timeout=%d): the server failed, so this run says nothing about corruption; check --url, --timeout and the server's log", o.Error, o.Timeout)
	case n > 0 && float64(o.NoTool) >= NoToolControlShare*float64(n):
		return VerdictNeedsControl, fmt.Sprintf("no_tool in %d of %d sessions (%.0f%%, at or above %.0f%%): a model that skips tools looks the same as corruption; "+
			"measure the same workload on a configuration believed clean (e.g. CUDA graphs disabled: SGLang --disable-cuda-graph, vLLM --enforce-eager) and compare with kvcanary ab before calling it corruption",
			o.NoTool, n, 100*float64(o.NoTool)/float64(n), 100*NoToolControlShare)
	}
	return VerdictMeasured, ""
}
