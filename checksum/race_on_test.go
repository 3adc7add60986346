//go:build race

package checksum_test

// raceEnabled shrinks the twin acceptance workload under the race detector,
// which slows the twin's decode math about tenfold.
const raceEnabled = true
