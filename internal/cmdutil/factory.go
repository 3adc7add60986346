package cmdutil

import (
	"context"
	"time"
)

// Factory carries what commands need from the outside world, so tests can
// replace each piece: streams, clock, and the context cancelled on SIGINT/SIGTERM.
type Factory struct {
	IO  *IOStreams
	Now func() time.Time
	Ctx context.Context
}

// NewFactory returns a Factory over the process's streams and wall clock.
func NewFactory(ctx context.Context) *Factory {
	return &Factory{IO: System(), Now: time.Now, Ctx: ctx}
}
