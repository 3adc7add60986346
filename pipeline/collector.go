package pipeline

import (
	"context"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Collector is the source of a listening hook.Collector (collect, watch
// --listen): it serves producers until ctx is cancelled. Its ingest
// rejections go in the bundle's footer; StatusOf, when set, turns its
// counters into the status line.
type Collector struct {
	C        *hook.Collector
	StatusOf func(hook.Stats) string
}

// Run serves until ctx is cancelled, then waits for every connection.
func (c *Collector) Run(ctx context.Context, pub hook.Publisher) error { return c.C.Serve(ctx, pub) }

// Rejected is the collector's count of rejected frames and lines.
func (c *Collector) Rejected() uint64 { return c.C.Stats().Rejected }

// Status is StatusOf of the collector's counters ("" without StatusOf).
func (c *Collector) Status() string {
	if c.StatusOf == nil {
		return ""
	}
	return c.StatusOf(c.C.Stats())
}
