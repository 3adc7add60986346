//go:build race

package canary_test

// raceEnabled: the twin runs of the tests (twinRun) re-check arithmetic,
// which the plain pass of make test does; under the race detector they skip.
const raceEnabled = true
