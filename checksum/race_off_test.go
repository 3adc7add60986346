//go:build !race

package checksum_test

const raceEnabled = false
