//go:build !race

package bisect

const raceEnabled = false
