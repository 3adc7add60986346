package sessions_test

import (
	"fmt"

	"github.com/kvcanary/kvcanary/sessions"
)

func ExampleFisherExact() {
	// The seeds' first A/B: 14/80 sessions leaked with bf16 index keys, 1/80
	// with fp8. Rows are the arms, columns corrupted / not corrupted.
	p := sessions.FisherExact(14, 66, 1, 79)
	fmt.Println(sessions.FormatP(p))
	// Output: 0.000568
}
