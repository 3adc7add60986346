//go:build race

package report_test

// raceEnabled scales the twin runs of the tests down under the race
// detector: their full sizes re-check arithmetic, which the plain pass of
// make test does.
const raceEnabled = true
