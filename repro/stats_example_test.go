package repro_test

import (
	"fmt"
	"time"

	"github.com/kvcanary/kvcanary/repro"
)

func ExampleFisherExact() {
	// The seeds' first A/B: 14/80 sessions leaked with bf16 index keys, 1/80
	// with fp8. Rows are the arms, columns corrupted / not corrupted.
	p := repro.FisherExact(14, 66, 1, 79)
	fmt.Println(repro.FormatP(p))
	// Output: 0.000568
}

func ExampleWilson() {
	lo, hi := repro.Wilson(14, 80, repro.Z95)
	fmt.Printf("%.3f %.3f\n", lo, hi)
	// Output: 0.107 0.273
}

func ExampleSummary_Headline() {
	s := repro.SummaryOf(repro.Outcomes{Done: 8, MaxRounds: 58, Leak: 14}, 4, 313*time.Second)
	fmt.Println(s.Headline())
	// Output: CORRUPTION sessions: 14/80 = 18% (leak=14 no_tool=0 error=0 intact[done/maxrounds]=66) 95% CI [10.7%, 27.3%]
}
