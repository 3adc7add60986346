//go:build unix

package cudaprobe

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) this process has used: benchmarks
// report throughput per CPU-second too, which a loaded machine distorts less
// than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
