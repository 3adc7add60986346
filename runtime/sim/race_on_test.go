//go:build race

package sim

// raceEnabled scales test workloads down under the race detector.
const raceEnabled = true
