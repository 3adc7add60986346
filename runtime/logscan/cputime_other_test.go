//go:build !unix

package logscan

import "time"

// processCPU is not available here; CPU-second metrics are skipped.
func processCPU() time.Duration { return 0 }
