package tui

import "math"

// The replay (pipeline.ReplayBundle, a source) moves the cursor through
// these methods: Cursor implements pipeline.Position without tui importing
// the source or the source importing tui.

// SetSpeed records the replay's speed (0: as fast as possible).
func (c *Cursor) SetSpeed(speed float64) { c.speed.Store(math.Float64bits(speed)) }

// SetSpan records the first and last event times of the bundle.
func (c *Cursor) SetSpan(first, last int64) {
	c.first.Store(first)
	c.last.Store(last)
}

// Advance moves the cursor to ts; it never moves back.
func (c *Cursor) Advance(ts int64) {
	if ts > c.at.Load() {
		c.at.Store(ts)
	}
}

// Finish marks the replay done.
func (c *Cursor) Finish() { c.done.Store(true) }
