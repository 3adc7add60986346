//go:build !race

package perfetto_test

const raceEnabled = false
