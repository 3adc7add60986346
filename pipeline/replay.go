package pipeline

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

// Position follows a replay: the dashboard's cursor implements it (the view
// reads it; the replay, a source, writes it, knowing only this interface).
type Position interface {
	SetSpeed(speed float64)
	SetSpan(firstTS, lastTS int64)
	Advance(ts int64) // moves forward only
	Finish()
}

// ReplayOptions configure ReplayBundle.
type ReplayOptions struct {
	// Speed is event time per wall time (10 replays ten seconds of the run
	// each second); 0 replays as fast as the reader goes.
	Speed float64
	// Rejudge names analyzers that judge the replay again: their recorded
	// findings are left out so each finding shows once.
	Rejudge map[string]bool
	// Cursor, when set, follows the replay's position.
	Cursor Position
}

// Replay is the source that replays a bundle (watch --bundle).
type Replay struct {
	Path string
	Opts ReplayOptions
}

// Run replays r.Path into pub (see ReplayBundle).
func (r Replay) Run(ctx context.Context, pub hook.Publisher) error {
	return ReplayBundle(ctx, r.Path, pub, r.Opts)
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
		c = noPosition{}
	}
	c.SetSpeed(opts.Speed)
	defer c.Finish()
	sum, err := traces.Inspect(path)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	c.SetSpan(sum.FirstTS, sum.LastTS)
	r, err := traces.Open(path)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer r.Close()
	pace := newPacer(opts.Speed, c)
	defer pace.stop()
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
		if !pace.wait(ctx, ev.TS) {
			return nil
		}
		pub.Publish(ev)
	}
}

type noPosition struct{}

func (noPosition) SetSpeed(float64)     {}
func (noPosition) SetSpan(int64, int64) {}
func (noPosition) Advance(int64)        {}
func (noPosition) Finish()              {}

// paceSlack is how early an event may be passed on: a wait shorter than
// this is not worth a timer, so a replay may end up to paceSlack before
// its span allows.
const paceSlack = 2 * time.Millisecond

// maxPaceWait bounds the wall time the pacer waits for any one event. A
// longer gap (an idle stretch of the run, or a bundle written before the
// collector refused impossible timestamps, or by another tool, holding
// ts_ns 2^63-1) is cut to this, and pacing resumes from that event: a replay
// never stalls for years on one bad timestamp. A variable for tests.
var maxPaceWait = 5 * time.Second

// pacer holds events back until their time: event time advances speed
// times faster than wall time from the first event on, except that no one
// wait exceeds maxWait.
type pacer struct {
	speed   float64
	c       Position
	wall0   time.Time
	ts0     int64
	maxWait time.Duration
	timer   *time.Timer
}

func newPacer(speed float64, c Position) *pacer {
	return &pacer{speed: speed, c: c, maxWait: maxPaceWait}
}

// wait returns when the event at ts is due (false when ctx ended first) and
// moves the cursor to it.
func (p *pacer) wait(ctx context.Context, ts int64) bool {
	if p.speed > 0 && ts > 0 {
		if p.wall0.IsZero() {
			p.wall0, p.ts0 = time.Now(), ts
		}
		// In float64: ts-p.ts0 cannot overflow (both are positive), but
		// divided by a speed below 1 it can exceed what a Duration holds.
		dNS := float64(ts-p.ts0)/p.speed - float64(time.Since(p.wall0))
		d, cut := time.Duration(0), false
		if dNS > float64(p.maxWait) {
			d, cut = p.maxWait, true
		} else if dNS > 0 {
			d = time.Duration(dNS)
		}
		if d > paceSlack {
			if p.timer == nil {
				p.timer = time.NewTimer(d)
			} else {
				p.timer.Reset(d)
			}
			select {
			case <-ctx.Done():
				return false
			case <-p.timer.C:
			}
		}
		if cut { // this event is due now; pace the rest from it
			p.wall0, p.ts0 = time.Now(), ts
		}
	}
	if p.c != nil {
		p.c.Advance(ts)
	}
	return true
}

func (p *pacer) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}

// Paced returns a Publisher that holds each event back until its time, event
// time running speed times faster than wall time (0: no pacing), so a fast
// producer such as the twin can be watched at a human pace. It blocks the
// producer, which is the point; once ctx ends it passes events straight on.
func Paced(ctx context.Context, pub hook.Publisher, speed float64) hook.Publisher {
	p := newPacer(speed, nil)
	return hook.PublishFunc(func(ev hook.Event) {
		if ctx.Err() == nil {
			p.wait(ctx, ev.TS)
		}
		pub.Publish(ev)
	})
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
