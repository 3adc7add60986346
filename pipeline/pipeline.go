package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// Source produces events: a collector, a bundle replay, the twin, the repro
// harness, a probe. Run publishes to pub until the source is done or ctx is
// cancelled, and returns nil when it stopped because ctx was cancelled.
// pub may be called from several goroutines: the pipeline serialises it.
type Source interface {
	Run(ctx context.Context, pub hook.Publisher) error
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context, pub hook.Publisher) error

// Run calls f.
func (f SourceFunc) Run(ctx context.Context, pub hook.Publisher) error { return f(ctx, pub) }

// Statuser is a Source that can say where it is, for the status line and
// the dashboard's source line: "3/80 sessions finished".
type Statuser interface {
	Status() string
}

// Rejecter is a Source that refuses malformed input at ingest (a collector):
// its count goes in the bundle's footer before the recording closes.
type Rejecter interface {
	Rejected() uint64
}

// Lossy is a Source that loses events before it can publish them (a
// kernel ring buffer that overflowed): its count is the bundle's "dropped".
type Lossy interface {
	Lost() uint64
}

// View is a live view (the dashboard). It reads sub, which drops its oldest
// events when the view falls behind and counts them; done receives the
// source's end (nil when it was cancelled). The view runs on Run's
// goroutine; when it returns the source is cancelled.
type View func(ctx context.Context, sub *hook.Subscription, done <-chan error) error

// DefaultViewCapacity is the live view's queue when Options.ViewCapacity is 0.
const DefaultViewCapacity = 1 << 16

// recordBuffer is the lossless recorder's queue: a full queue slows the
// source, never loses an event.
const recordBuffer = 8192

// Options choose the sinks of a pipeline. Only the fields set are wired.
type Options struct {
	// Record, when set, is the trace bundle every event is written to,
	// losslessly (a slow disk slows the source), with Manifest.
	Record   string
	Manifest traces.Manifest
	// KeepPrevious sets aside a bundle already at Record (traces.SetAside)
	// instead of truncating it: what services restarted with the same path
	// (collect, probe cuda, sim serve) want. Kept says where it went.
	KeepPrevious bool
	// OnRecordError, when set, is called once with the bundle's first I/O
	// error as soon as the recorder meets it (from the writer's goroutine:
	// print a note, do not block), not only when Run returns.
	OnRecordError func(error)

	// Middleware wraps the pipeline's input before the analyzers (redaction,
	// tallies, settings merges). It sees every source event, serialised.
	Middleware func(next hook.Publisher) hook.Publisher
	// Analyzers judge each event on the way; their findings follow it.
	Analyzers []hook.Analyzer
	// StampRun is put on every event without a run, after the analyzers.
	StampRun string
	// Sinks see every event and finding after the analyzers, on the source's
	// goroutine: they must not block for long (a sink that may fall behind
	// keeps its own bounded queue and counts its drops). Those that are
	// io.Closers are closed once the source has ended and the bus drained.
	// Metrics and OTLP exporters plug in here.
	Sinks []hook.Publisher

	// View, when set, is run live; ViewCapacity bounds its queue.
	View         View
	ViewCapacity int

	// Status is the command's status line (inert off a terminal). When the
	// source is a Statuser, the pipeline redraws StatusLabel + its status
	// every StatusEvery (default 1s) until the source ends, then clears it.
	Status      *StatusLine
	StatusLabel string
	StatusEvery time.Duration
}

// Pipeline is one run: source → (middleware) → analyzers → bus → recorder,
// live view and sinks. New creates the bundle; Run runs a source through
// it once.
type Pipeline struct {
	opts   Options
	bus    *hook.Bus
	writer *traces.Writer
	kept   string // where KeepPrevious put the bundle that was at Record
	recErr chan error
	view   *hook.Subscription

	mu     sync.Mutex // serialises the input
	in     hook.Publisher
	closed bool // the bus is closed: Publish drops
	ran    bool

	published atomic.Uint64
	emitted   atomic.Uint64
	prodDrop  atomic.Uint64
}

// New builds a pipeline and creates its bundle (the error is traces'
// "create bundle: …"). Nothing runs until Run.
func New(opts Options) (*Pipeline, error) {
	p := &Pipeline{opts: opts, bus: hook.NewBus()}
	if opts.Record != "" {
		if opts.KeepPrevious {
			kept, err := traces.SetAside(opts.Record)
			if err != nil {
				return nil, err
			}
			p.kept = kept
		}
		w, err := traces.Create(opts.Record, opts.Manifest)
		if err != nil {
			return nil, err
		}
		p.writer = w
		if opts.OnRecordError != nil {
			w.OnError(opts.OnRecordError)
		}
		sub := p.bus.Lossless("record", recordBuffer)
		p.recErr = make(chan error, 1)
		go func() { p.recErr <- traces.Record(sub, w) }()
	}
	if opts.View != nil {
		c := opts.ViewCapacity
		if c <= 0 {
			c = DefaultViewCapacity
		}
		p.view = p.bus.Live("view", c)
	}
	var out hook.Publisher = p.bus
	if len(opts.Sinks) > 0 {
		sinks := append([]hook.Publisher{p.bus}, opts.Sinks...)
		out = hook.PublishFunc(func(ev hook.Event) {
			for _, s := range sinks {
				s.Publish(ev)
			}
		})
	}
	counted := out
	out = hook.PublishFunc(func(ev hook.Event) { p.emitted.Add(1); counted.Publish(ev) })
	out = hook.WithRun(out, opts.StampRun)
	if len(opts.Analyzers) > 0 {
		out = hook.WithAnalyzers(out, opts.Analyzers...)
	}
	if opts.Middleware != nil {
		out = opts.Middleware(out)
	}
	p.in = out
	return p, nil
}

// Publish hands ev to the pipeline as the source would (for an event a
// command publishes itself). Safe for concurrent use; a no-op once Run has
// returned.
func (p *Pipeline) Publish(ev hook.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.published.Add(1)
	if re, ok := ev.Body.(*hook.RunEnd); ok && re != nil {
		p.prodDrop.Add(re.Dropped)
	}
	p.in.Publish(ev)
}

// Writer is the bundle writer (nil without Record), for its counts.
func (p *Pipeline) Writer() *traces.Writer { return p.writer }

// Kept is where New set aside the bundle that was at Record (KeepPrevious),
// "" when there was none.
func (p *Pipeline) Kept() string { return p.kept }

// Result is what a run saw and lost, for the end-of-run report.
type Result struct {
	// SourceErr is the source's error (a panic in it included); ViewErr the
	// view's; RecordErr the recorder's (an I/O error: the events it could
	// not keep are counted in RecordDropped); SinkErr the first error of a
	// sink's Close.
	SourceErr, ViewErr, RecordErr, SinkErr error
	// Cancelled: the source was stopped (ctx or the view quit) before it
	// ended on its own.
	Cancelled bool

	Published       uint64 // events the source published
	Emitted         uint64 // events and findings handed to the sinks
	ProducerDropped uint64 // events producers reported lost (run.end)
	Recorded        uint64 // events in the bundle, as a reader reads them back
	RecordLost      uint64 // events an I/O error kept from the bundle (RecordErr)
	RecordRejected  uint64 // events the bundle refused as invalid (a Rejecter's count not included)
	ViewDropped     uint64 // events the live view dropped
}

// Err merges the errors in the order a user needs them: the view's (unless
// it is the source's, handed to it), the source's, the recorder's, a sink's.
func (r Result) Err() error {
	switch {
	case r.ViewErr != nil && !errors.Is(r.ViewErr, r.SourceErr):
		return r.ViewErr
	case r.SourceErr != nil:
		return r.SourceErr
	case r.RecordErr != nil:
		return r.RecordErr
	}
	return r.SinkErr
}

// Run runs src through the pipeline until it ends or ctx is cancelled (the
// first signal), then drains: the bus closes, the recorder writes what is
// queued and closes the bundle, the sinks are closed. With a View, the view
// runs on this goroutine and its end cancels the source. Run may be called
// once.
func (p *Pipeline) Run(ctx context.Context, src Source) Result {
	if p.ran {
		panic("pipeline: Run called twice")
	}
	p.ran = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopStatus := p.followStatus(ctx, src)

	var res Result
	toView := make(chan error, 1)
	srcDone := make(chan struct{})
	go func() {
		defer close(srcDone)
		res.SourceErr = runSource(ctx, src, hook.PublishFunc(p.Publish))
		res.Cancelled = ctx.Err() != nil
		if r, ok := src.(Rejecter); ok && p.writer != nil {
			// Before the bus closes (and the recorder closes the bundle):
			// the footer says what this recording refused at ingest.
			p.writer.AddRejected(r.Rejected())
		}
		if l, ok := src.(Lossy); ok && p.writer != nil {
			p.writer.SetDropped(l.Lost())
		}
		p.mu.Lock()
		p.bus.Close()
		p.mu.Unlock()
		if res.Cancelled {
			toView <- nil
		} else {
			toView <- res.SourceErr
		}
	}()
	if p.opts.View != nil {
		res.ViewErr = p.opts.View(ctx, p.view, toView)
		cancel()
	}
	<-srcDone
	stopStatus()
	res.RecordErr = p.drain()
	res.SinkErr = closeSinks(p.opts.Sinks)
	res.Published, res.Emitted, res.ProducerDropped = p.published.Load(), p.emitted.Load(), p.prodDrop.Load()
	if p.writer != nil {
		res.Recorded, res.RecordLost, res.RecordRejected = p.writer.Count(), p.writer.Lost(), p.writer.Rejected()
	}
	if p.view != nil {
		res.ViewDropped = p.view.Dropped()
	}
	return res
}

// Close ends a pipeline that will not Run (the source could not start):
// the bundle is closed with what was published, and the sinks closed.
func (p *Pipeline) Close() error {
	if p.ran {
		return nil
	}
	p.ran = true
	p.closeBus()
	err := p.drain()
	if serr := closeSinks(p.opts.Sinks); err == nil {
		err = serr
	}
	return err
}

func (p *Pipeline) closeBus() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.bus.Close()
}

func (p *Pipeline) drain() error {
	if p.recErr == nil {
		return nil
	}
	return <-p.recErr
}

func (p *Pipeline) followStatus(ctx context.Context, src Source) (stop func()) {
	st, ok := src.(Statuser)
	if !ok || p.opts.Status == nil {
		return func() {}
	}
	every := p.opts.StatusEvery
	if every <= 0 {
		every = time.Second
	}
	return p.opts.Status.Follow(ctx, every, func() string { return p.opts.StatusLabel + st.Status() })
}

// runSource runs src, turning a panic into an error so a dashboard can
// restore the terminal instead of dying in raw mode.
func runSource(ctx context.Context, src Source, pub hook.Publisher) (err error) {
	defer Recover(&err)
	return src.Run(ctx, pub)
}

// Recover turns a panic into an error: defer pipeline.Recover(&err).
func Recover(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("source panicked: %v", r)
	}
}

func closeSinks(sinks []hook.Publisher) error {
	var first error
	for _, s := range sinks {
		if c, ok := s.(io.Closer); ok {
			if err := c.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
