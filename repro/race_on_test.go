//go:build race

package repro_test

// raceEnabled: the race detector slows the twin ~10×; tests shrink their runs.
const raceEnabled = true
