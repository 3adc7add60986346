package outcome_test

import (
	"fmt"
	"time"

	"github.com/kvcanary/kvcanary/spec/outcome"
)

func ExampleWilson() {
	lo, hi := outcome.Wilson(14, 80, outcome.Z95)
	fmt.Printf("%.3f %.3f\n", lo, hi)
	// Output: 0.107 0.273
}

func ExampleSummary_Headline() {
	s := outcome.SummaryOf(outcome.Counts{Done: 8, MaxRounds: 58, Leak: 14}, 4, 313*time.Second)
	fmt.Println(s.Headline())
	// Output: CORRUPTION sessions: 14/80 = 18% (leak=14 no_tool=0 error=0 intact[done/maxrounds]=66) 95% CI [10.7%, 27.3%]
}
