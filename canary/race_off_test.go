//go:build !race

package canary_test

const raceEnabled = false
