//go:build unix

package traces

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user+system, all threads) this process used so
// far; benchmarks report throughput per CPU second next to wall-clock
// throughput, because wall clock on a shared 2-core machine mostly measures
// the neighbours.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
