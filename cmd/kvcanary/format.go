package main

import "fmt"

// Small text helpers the report commands share.

// units returns unit for n == 1 and its plural (unit+"s") otherwise.
func units(n int64, unit string) string {
	if n == 1 {
		return unit
	}
	return unit + "s"
}

// plural renders "1 line", "2 lines".
func plural(n int64, unit string) string { return fmt.Sprintf("%d %s", n, units(n, unit)) }
