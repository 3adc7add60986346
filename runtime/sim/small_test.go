package sim

import "testing"

// small says whether tests run their reduced sizes: under the race
// detector (the twin's index-K arithmetic is many times slower there, and
// the full sizes only re-check it) and with -short (make check, the quick
// loop). The plain `go test ./runtime/sim` of make test runs the full sizes.
func small() bool { return raceEnabled || testing.Short() }
