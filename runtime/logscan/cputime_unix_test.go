//go:build unix

package logscan

import (
	"syscall"
	"time"
)

// processCPU returns the user+system CPU time this process has used, so
// benchmarks can report throughput per CPU-second, which a loaded machine
// does not distort the way it distorts wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
