//go:build race

package demo

// raceEnabled: the race detector slows the twin ~10×; full-size runs skip.
const raceEnabled = true
