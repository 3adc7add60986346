//go:build !unix

package cudaprobe

import "time"

// cpuTime is unavailable here; benchmarks then skip the per-CPU-second figure.
func cpuTime() time.Duration { return 0 }
