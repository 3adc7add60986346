package pipeline

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

func replayEv(i int) hook.Event {
	return hook.Event{Kind: hook.KindReplay, TS: at(float64(i)), Body: &hook.Replay{Step: uint64(i), BatchSize: 1, Mode: hook.ModeGraph}}
}

// countEvents reads a bundle to its end.
func countEvents(t *testing.T, path string) (n int, runs map[string]int) {
	t.Helper()
	r, err := traces.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	runs = map[string]int{}
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n, runs
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		runs[ev.Run]++
	}
}

// everyOther is an analyzer that finds something in every second replay.
type everyOther struct {
	mu sync.Mutex
	n  int
}

func (a *everyOther) Name() string { return "everyother" }
func (a *everyOther) Observe(ev hook.Event, emit func(hook.Event)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ev.Kind != hook.KindReplay {
		return
	}
	a.n++
	if a.n%2 == 0 {
		emit(hook.Event{Kind: hook.KindFinding, Body: &hook.Finding{Analyzer: "everyother", Severity: hook.SevError, Summary: "even"}})
	}
}

// closingSink counts what it sees and records its Close.
type closingSink struct {
	mu     sync.Mutex
	n      int
	closed bool
	err    error
}

func (s *closingSink) Publish(hook.Event) { s.mu.Lock(); s.n++; s.mu.Unlock() }
func (s *closingSink) Close() error       { s.closed = true; return s.err }

// TestRunDrainsEverythingToRecorderAndSinks: a source publishing from
// several goroutines at once ends; every event and finding reaches the
// bundle and the extra sinks before Run returns, the run id is stamped, the
// sinks are closed, and the counts add up.
func TestRunDrainsEverythingToRecorderAndSinks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.kvtrace")
	sink := &closingSink{}
	p, err := New(Options{Record: path, Manifest: traces.Manifest{Tool: "test", Run: "r1"}, Analyzers: []hook.Analyzer{&everyOther{}},
		StampRun: "r1", Sinks: []hook.Publisher{sink}})
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 2500
	res := p.Run(context.Background(), SourceFunc(func(ctx context.Context, pub hook.Publisher) error {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					pub.Publish(replayEv(w*each + i))
				}
			}()
		}
		wg.Wait()
		pub.Publish(hook.Event{Kind: hook.KindRunEnd, TS: at(1e4), Body: &hook.RunEnd{Dropped: 7}})
		return nil
	}))
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	const events = workers*each + 1
	const findings = workers * each / 2
	if res.Published != events || res.Emitted != events+findings || res.Recorded != events+findings || res.ProducerDropped != 7 || res.Cancelled {
		t.Fatalf("result %+v", res)
	}
	if sink.n != events+findings || !sink.closed {
		t.Fatalf("sink saw %d events (closed %v), want %d", sink.n, sink.closed, events+findings)
	}
	n, runs := countEvents(t, path)
	if n != events+findings || runs["r1"] != n {
		t.Fatalf("bundle holds %d events, runs %v", n, runs)
	}
	// After Run, publishing is a no-op.
	p.Publish(replayEv(0))
}

// TestCancelStopsTheSourceAndKeepsWhatWasPublished: cancelling the context
// (the first signal) stops a source that runs until cancelled; what it
// published is in the bundle, closed properly; Cancelled is set and the
// source's nil return is no error.
func TestCancelStopsTheSourceAndKeepsWhatWasPublished(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.kvtrace")
	p, err := New(Options{Record: path, Manifest: traces.Manifest{Tool: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := p.Run(ctx, SourceFunc(func(ctx context.Context, pub hook.Publisher) error {
		for i := range 100 {
			pub.Publish(replayEv(i))
		}
		cancel() // the signal arrives
		<-ctx.Done()
		return nil
	}))
	if res.Err() != nil || !res.Cancelled || res.Recorded != 100 {
		t.Fatalf("result %+v", res)
	}
	if n, _ := countEvents(t, path); n != 100 {
		t.Fatalf("bundle holds %d events, want 100", n)
	}
}

// TestViewDropsAndCountsWhileRecorderKeepsAll: a view that reads nothing
// until the source ends loses all but its capacity, counted; the recorder
// loses nothing; the view gets the source's end; the view quitting first
// cancels a source that would run forever.
func TestViewDropsAndCountsWhileRecorderKeepsAll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.kvtrace")
	var seen int
	var srcEnd error = errors.New("not delivered")
	p, err := New(Options{Record: path, Manifest: traces.Manifest{Tool: "test"}, ViewCapacity: 10,
		View: func(ctx context.Context, sub *hook.Subscription, done <-chan error) error {
			srcEnd = <-done // the source has ended: everything is queued or dropped
			for {
				if _, ok := sub.Recv(); !ok {
					return nil
				}
				seen++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Run(context.Background(), SourceFunc(func(ctx context.Context, pub hook.Publisher) error {
		for i := range 1000 {
			pub.Publish(replayEv(i))
		}
		return nil
	}))
	if res.Err() != nil || srcEnd != nil || seen != 10 || res.ViewDropped != 990 || res.Recorded != 1000 {
		t.Fatalf("result %+v, view saw %d, source end %v", res, seen, srcEnd)
	}

	p, err = New(Options{View: func(ctx context.Context, sub *hook.Subscription, done <-chan error) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	res = p.Run(context.Background(), SourceFunc(func(ctx context.Context, pub hook.Publisher) error {
		<-ctx.Done() // runs until the view quits
		return nil
	}))
	if !res.Cancelled || res.Err() != nil {
		t.Fatalf("view quit: %+v", res)
	}
}

// TestErrorMerge: the view's error first unless it is the source's own,
// then the source's, the recorder's, a sink's; a panicking source is an
// error, not a crash.
func TestErrorMerge(t *testing.T) {
	src, view, rec, sink := errors.New("src"), errors.New("view"), errors.New("rec"), errors.New("sink")
	for _, tc := range []struct {
		r    Result
		want error
	}{
		{Result{}, nil},
		{Result{SinkErr: sink}, sink},
		{Result{RecordErr: rec, SinkErr: sink}, rec},
		{Result{SourceErr: src, RecordErr: rec}, src},
		{Result{ViewErr: view, SourceErr: src, RecordErr: rec}, view},
		{Result{ViewErr: src, SourceErr: src}, src},
	} {
		if got := tc.r.Err(); got != tc.want {
			t.Errorf("%+v: Err() = %v, want %v", tc.r, got, tc.want)
		}
	}
	p, err := New(Options{Sinks: []hook.Publisher{&closingSink{err: sink}}})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Run(context.Background(), SourceFunc(func(context.Context, hook.Publisher) error { panic("boom") }))
	if res.SourceErr == nil || !strings.Contains(res.SourceErr.Error(), "panicked: boom") || res.SinkErr != sink {
		t.Fatalf("panicking source: %+v", res)
	}
}

// rejecting is a source that refused 3 inputs at ingest and lost 2.
type rejecting struct{}

func (rejecting) Run(ctx context.Context, pub hook.Publisher) error {
	pub.Publish(replayEv(1))
	return nil
}
func (rejecting) Rejected() uint64 { return 3 }
func (rejecting) Lost() uint64     { return 2 }

// TestIngestRejectsReachTheFooter: a Rejecter's count is in the bundle's
// footer (added before the recorder closes it), a Lossy's as dropped.
func TestIngestRejectsReachTheFooter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.kvtrace")
	p, err := New(Options{Record: path, Manifest: traces.Manifest{Tool: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Run(context.Background(), rejecting{})
	if res.Err() != nil || res.Recorded != 1 || res.RecordRejected != 0 {
		t.Fatalf("result %+v", res)
	}
	sum, err := traces.Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Footer == nil || sum.Footer.Rejected != 3 || sum.Footer.Dropped != 2 {
		t.Fatalf("footer %+v", sum.Footer)
	}
}

// TestCloseWithoutRunClosesTheBundle: a pipeline whose source never started
// leaves a valid, empty bundle.
func TestCloseWithoutRunClosesTheBundle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.kvtrace")
	p, err := New(Options{Record: path, Manifest: traces.Manifest{Tool: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := countEvents(t, path); n != 0 {
		t.Fatalf("%d events", n)
	}
}

// TestStatusLine: off a terminal it draws nothing and notes pass plainly;
// on one Set throttles by the clock, a note erases the line first, and
// stopping a Follow erases it.
func TestStatusLine(t *testing.T) {
	var b bytes.Buffer
	off := NewStatusLine(&b, false, nil)
	off.Set("x")
	off.Clear()
	off.Printf("note %d\n", 1)
	if b.String() != "note 1\n" {
		t.Fatalf("inert line wrote %q", b.String())
	}
	b.Reset()
	now := time.Unix(0, 0)
	l := NewStatusLine(&b, true, func() time.Time { return now })
	l.Set("a")
	l.Set("b") // within the throttle: not drawn
	now = now.Add(time.Second)
	l.Set("c")
	l.Printf("note\n")
	l.Clear()
	if want := "\r\033[Ka\r\033[Kc\r\033[Knote\n\r\033[K"; b.String() != want {
		t.Fatalf("status line wrote %q, want %q", b.String(), want)
	}
	var nilLine *StatusLine
	nilLine.Set("x")
	nilLine.Printf("y")
}

// BenchmarkPublish is the pipeline's cost per event on the hot path of a
// fast source (the twin): the serialising lock, the counters and the bus,
// with a recorder-free live view; compare BenchmarkBusPublish.
func BenchmarkPublish(b *testing.B) {
	p, err := New(Options{View: func(ctx context.Context, sub *hook.Subscription, done <-chan error) error {
		<-done
		return nil
	}, ViewCapacity: 1024})
	if err != nil {
		b.Fatal(err)
	}
	ev := replayEv(1)
	b.ReportAllocs()
	b.ResetTimer()
	p.Run(context.Background(), SourceFunc(func(ctx context.Context, pub hook.Publisher) error {
		for range b.N {
			pub.Publish(ev)
		}
		return nil
	}))
}

// BenchmarkBusPublish is the same live view fed by a bare bus.
func BenchmarkBusPublish(b *testing.B) {
	bus := hook.NewBus()
	bus.Live("view", 1024)
	ev := replayEv(1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		bus.Publish(ev)
	}
	bus.Close()
}
