//go:build race

package graphdiff_test

// raceEnabled is true when the race detector is on: the twin acceptance runs
// take minutes under it on a loaded 2-core machine, and the twin's own tests
// cover its concurrency.
const raceEnabled = true
