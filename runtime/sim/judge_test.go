package sim

import (
	"time"

	"github.com/kvcanary/kvcanary/repro"
)

// testJudge is the judge sim's tests run the twin with: repro's classifier,
// the one `sim run` uses. The twin only observes; the judging is repro's.
var testJudge Judge = repro.Classifier{}.Outcome

// testWorkload is DefaultWorkload with testJudge.
func testWorkload() Workload {
	w := DefaultWorkload()
	w.Judge = testJudge
	return w
}

// summary is res as repro summarises a run: outcome counts, corrupted
// sessions and the corruption rate.
func summary(res Result) repro.Summary {
	var o repro.Outcomes
	for _, s := range res.PerSession {
		o.Add(s.Outcome)
	}
	return repro.SummaryOf(o, res.Rounds, time.Duration(res.WallSeconds*float64(time.Second)))
}
