package sim

import (
	"github.com/kvcanary/kvcanary/spec/outcome"
	"time"
)

// testJudge is the judge sim's tests run the twin with: repro's classifier,
// the one `sim run` uses. The twin only observes; the judging is repro's.
var testJudge Judge = outcome.Classifier{}.Outcome

// testWorkload is DefaultWorkload with testJudge.
func testWorkload() Workload {
	w := DefaultWorkload()
	w.Judge = testJudge
	return w
}

// summary is res as repro summarises a run: outcome counts, corrupted
// sessions and the corruption rate.
func summary(res Result) outcome.Summary {
	var o outcome.Counts
	for _, s := range res.PerSession {
		o.Add(s.Outcome)
	}
	return outcome.SummaryOf(o, res.Rounds, time.Duration(res.WallSeconds*float64(time.Second)))
}
