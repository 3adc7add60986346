package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// ReplayOptions configure ReplayBundle.
type ReplayOptions struct {
	// Speed is event time per wall time (10 replays ten seconds of the run
	// each second); 0 replays as fast as the reader goes.
	Speed float64
	// Rejudge names analyzers that judge the replay again: their recorded
	// findings are left out so each finding shows once.
	Rejudge map[string]bool
	// Cursor, when set, follows the replay's position.
	Cursor *Cursor
}

// ReplayBundle publishes the events of the bundle at path to pub, paced by
// opts.Speed, until the end of the bundle or ctx. It first reads the
// bundle's envelopes once for its time span (the cursor's extent). The error
// names the file; a damaged or truncated bundle is replayed up to its damage
// (the traces reader skips and counts what it cannot read).
func ReplayBundle(ctx context.Context, path string, pub hook.Publisher, opts ReplayOptions) (err error) {
	defer Recover(&err)
	c := opts.Cursor
	if c == nil {
		c = &Cursor{}
	}
	c.speed.Store(math.Float64bits(opts.Speed))
	defer c.done.Store(true)
	sum, err := traces.Inspect(path)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	c.first.Store(sum.FirstTS)
	c.last.Store(sum.LastTS)
	r, err := traces.Open(path)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer r.Close()
	var (
		wall0 time.Time
		ts0   int64
		timer *time.Timer
	)
	for {
		if err := ctx.Err(); err != nil {
			return nil
		}
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("replay %s: %w", path, err)
		}
		if f, ok := ev.Body.(*hook.Finding); ok && opts.Rejudge[f.Analyzer] {
			continue
		}
		if opts.Speed > 0 && ev.TS > 0 {
			if wall0.IsZero() {
				wall0, ts0 = time.Now(), ev.TS
			}
			due := wall0.Add(time.Duration(float64(ev.TS-ts0) / opts.Speed))
			if d := time.Until(due); d > 2*time.Millisecond {
				if timer == nil {
					timer = time.NewTimer(d)
					defer timer.Stop()
				} else {
					timer.Reset(d)
				}
				select {
				case <-ctx.Done():
					return nil
				case <-timer.C:
				}
			}
		}
		if ev.TS > c.at.Load() {
			c.at.Store(ev.TS)
		}
		pub.Publish(ev)
	}
}

// ParseSpeed reads a --speed value: "10x", "10", "0.5x", or "max" (0: as
// fast as possible).
func ParseSpeed(s string) (float64, error) {
	if s == "max" {
		return 0, nil
	}
	t := strings.TrimSuffix(strings.TrimSuffix(s, "x"), "X")
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("speed %q: want a positive factor like 10x, or max", s)
	}
	return v, nil
}
