package hook

import (
	"sync"
	"sync/atomic"
)

// Publisher is anything events can be handed to: a Bus, an emitter, a bundle
// writer adapter. Publish must not retain ev.Body beyond the call unless the
// body is never mutated afterwards (sources allocate a fresh body per event).
type Publisher interface {
	Publish(ev Event)
}

// PublishFunc adapts a function to Publisher.
type PublishFunc func(Event)

// Publish calls f(ev).
func (f PublishFunc) Publish(ev Event) { f(ev) }

// Bus fans events out to subscribers. A lossless subscriber (the bundle writer)
// receives every event and may slow the producer; a live subscriber (a view)
// has a bounded queue that drops its oldest event when full and counts the
// drop. Close stops accepting events and lets every subscriber drain.
type Bus struct {
	mu     sync.RWMutex
	subs   []*Subscription
	closed bool
}

// NewBus returns an empty bus.
func NewBus() *Bus { return &Bus{} }

// Subscription is one subscriber's queue.
type Subscription struct {
	name     string
	lossless bool

	ch chan Event // lossless

	mu     sync.Mutex // live
	ring   []Event
	head   int
	n      int
	notify chan struct{}
	done   bool

	dropped   atomic.Uint64
	delivered atomic.Uint64
}

// Lossless subscribes a consumer that must see every event. The producer blocks
// when its queue of buffer events is full.
func (b *Bus) Lossless(name string, buffer int) *Subscription {
	if buffer < 1 {
		buffer = 1
	}
	s := &Subscription{name: name, lossless: true, ch: make(chan Event, buffer)}
	b.add(s)
	return s
}

// Live subscribes a consumer that may fall behind: its queue holds at most
// capacity events, the oldest is dropped when full, and drops are counted.
func (b *Bus) Live(name string, capacity int) *Subscription {
	if capacity < 1 {
		capacity = 1
	}
	s := &Subscription{name: name, ring: make([]Event, capacity), notify: make(chan struct{}, 1)}
	b.add(s)
	return s
}

func (b *Bus) add(s *Subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		s.close()
		return
	}
	b.subs = append(b.subs, s)
}

// Publish delivers ev to every subscriber. After Close it is a no-op.
func (b *Bus) Publish(ev Event) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return
	}
	for _, s := range b.subs {
		s.push(ev)
	}
}

// Close stops the bus. Subscribers receive what is queued, then end.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for _, s := range b.subs {
		s.close()
	}
}

// Subscriptions returns the current subscribers (for drop reports at exit).
func (b *Bus) Subscriptions() []*Subscription {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return append([]*Subscription(nil), b.subs...)
}

func (s *Subscription) push(ev Event) {
	if s.lossless {
		s.ch <- ev
		return
	}
	s.mu.Lock()
	if s.n == len(s.ring) {
		s.ring[s.head] = Event{}
		s.head = (s.head + 1) % len(s.ring)
		s.n--
		s.dropped.Add(1)
	}
	s.ring[(s.head+s.n)%len(s.ring)] = ev
	s.n++
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Subscription) close() {
	if s.lossless {
		close(s.ch)
		return
	}
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Name is the subscriber's name, for reports.
func (s *Subscription) Name() string { return s.name }

// Dropped is the number of events this subscriber lost (always 0 when lossless).
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Delivered is the number of events handed to the consumer so far.
func (s *Subscription) Delivered() uint64 { return s.delivered.Load() }

// Recv blocks until an event is available and returns it, or returns false
// once the bus is closed and the queue is drained.
func (s *Subscription) Recv() (Event, bool) {
	if s.lossless {
		ev, ok := <-s.ch
		if ok {
			s.delivered.Add(1)
		}
		return ev, ok
	}
	for {
		s.mu.Lock()
		if s.n > 0 {
			ev := s.ring[s.head]
			s.ring[s.head] = Event{}
			s.head = (s.head + 1) % len(s.ring)
			s.n--
			s.mu.Unlock()
			s.delivered.Add(1)
			return ev, true
		}
		done := s.done
		s.mu.Unlock()
		if done {
			return Event{}, false
		}
		<-s.notify
	}
}

// Drain appends every queued event to dst without blocking (live subscribers
// only; a lossless subscriber drains what its channel holds) and reports
// whether the subscription is still open.
func (s *Subscription) Drain(dst []Event) ([]Event, bool) {
	if s.lossless {
		for {
			select {
			case ev, ok := <-s.ch:
				if !ok {
					return dst, false
				}
				s.delivered.Add(1)
				dst = append(dst, ev)
			default:
				return dst, true
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.n > 0 {
		dst = append(dst, s.ring[s.head])
		s.ring[s.head] = Event{}
		s.head = (s.head + 1) % len(s.ring)
		s.n--
		s.delivered.Add(1)
	}
	return dst, !s.done
}

// Ready returns a channel that receives a value when a live subscription may
// have new events or has closed (use with Drain). Nil for lossless ones.
func (s *Subscription) Ready() <-chan struct{} {
	if s.lossless {
		return nil
	}
	return s.notify
}

// Analyzer judges a stream of events. Implementations live in the analyzer
// packages (checksum, canary, graphdiff); sources never import them.
// What an analyzer concluded over the run is not the bus's business: each
// one's typed aggregate is read from the concrete analyzer (their Result
// methods, gathered in internal/analyzers' Summaries).
type Analyzer interface {
	// Name is the analyzer's name and its section key in run reports.
	Name() string
	// Observe looks at one event and calls emit for each finding it makes.
	Observe(ev Event, emit func(Event))
}

// WithRun returns a Publisher that stamps run on every event that carries
// none before next sees it (an empty run passes events through as they are).
func WithRun(next Publisher, run string) Publisher {
	if run == "" {
		return next
	}
	return PublishFunc(func(ev Event) {
		if ev.Run == "" {
			ev.Run = run
		}
		next.Publish(ev)
	})
}

// WithAnalyzers returns a Publisher that shows each event to the analyzers, in
// order, on the caller's goroutine (deterministic), then publishes the event
// and any findings to next. Findings carry the triggering event's timestamp,
// source and run id.
func WithAnalyzers(next Publisher, as ...Analyzer) Publisher {
	return PublishFunc(func(ev Event) {
		var findings []Event
		emit := func(f Event) {
			if f.TS == 0 {
				f.TS = ev.TS
			}
			if f.Src == (Source{}) {
				f.Src = ev.Src
			}
			if f.Run == "" {
				f.Run = ev.Run
			}
			findings = append(findings, f)
		}
		for _, a := range as {
			a.Observe(ev, emit)
		}
		next.Publish(ev)
		for _, f := range findings {
			next.Publish(f)
		}
	})
}
