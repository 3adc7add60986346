package tui

import (
	"math"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// quoteAll quotes untrusted text for the terminal (see cmdutil.Quote).
func quoteAll(s string) string { return cmdutil.Quote(s) }

func float64frombits(b uint64) float64 { return math.Float64frombits(b) }
