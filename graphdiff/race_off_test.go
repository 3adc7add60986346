//go:build !race

package graphdiff_test

const raceEnabled = false
