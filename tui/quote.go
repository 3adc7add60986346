package tui

import (
	"math"

	"github.com/kvcanary/kvcanary/internal/safetext"
)

// quoteAll quotes untrusted text for the terminal (safetext.Quote, the one
// quoting kvcanary's sinks and commands share).
func quoteAll(s string) string { return safetext.Quote(s) }

func float64frombits(b uint64) float64 { return math.Float64frombits(b) }
