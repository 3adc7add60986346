package tui

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

const burstEvents = 1_000_000

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// publishBurst publishes n scheduler events (a fresh body each, as sources
// do) and returns once all are handed to the bus.
func publishBurst(bus *hook.Bus, n int) {
	for i := 0; i < n; i++ {
		bus.Publish(hook.Event{Kind: hook.KindSched, TS: int64(i) * 1000, Body: &hook.Sched{RunningReq: i % 64, TokenUsage: 0.5, Phase: "decode"}})
	}
}

// TestBurstNeverBlocksProducer: a burst of a million events into a bus whose
// dashboard is frozen (nobody drains its live subscription) completes — the
// producer never waits for the view — and the subscription keeps only its
// capacity, counting the rest as dropped; the heap holds about one ring of
// events, not the burst.
func TestBurstNeverBlocksProducer(t *testing.T) {
	bus := hook.NewBus()
	sub := bus.Live("tui", DefaultLiveCapacity)
	m := New(Options{Sub: sub, Styles: asciiStyles()})
	base := heapAfterGC()
	finished := make(chan struct{})
	go func() { publishBurst(bus, burstEvents); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute): // a hang guard, not a speed target
		t.Fatal("the producer blocked on a view that does not drain")
	}
	grown := int64(heapAfterGC()) - int64(base)
	if d := sub.Dropped(); d != burstEvents-DefaultLiveCapacity {
		t.Fatalf("dropped %d, want %d (burst minus the ring)", d, burstEvents-DefaultLiveCapacity)
	}
	// What the ring keeps: capacity events and their bodies. Everything the
	// burst allocated beyond that is garbage.
	const perEvent = 200
	if limit := int64(DefaultLiveCapacity * perEvent); grown > limit {
		t.Fatalf("heap grew %d MiB over the burst, more than one ring (%d MiB)", grown>>20, limit>>20)
	}
	t.Logf("frozen view: heap +%d MiB after %d events, %d dropped", grown>>20, burstEvents, sub.Dropped())
	runtime.KeepAlive(m)
	bus.Close()
}

// TestBurstWithRunningView: the same burst while the dashboard ingests on its
// frame tick. Every event is either shown or counted as dropped, and the
// dashboard's memory stays bounded by its window and aggregates.
func TestBurstWithRunningView(t *testing.T) {
	bus := hook.NewBus()
	sub := bus.Live("tui", DefaultLiveCapacity)
	m := New(Options{Sub: sub, Styles: asciiStyles(), FrameInterval: 5 * time.Millisecond})
	base := heapAfterGC()
	var wg sync.WaitGroup
	wg.Add(1)
	stop := make(chan struct{})
	go func() { // the program's loop: frame Cmd, then Update and View
		defer wg.Done()
		for {
			msg := m.tick()()
			m.Update(msg)
			_ = m.View()
			if f := msg.(frameMsg); !f.open {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	publishBurst(bus, burstEvents)
	bus.Close()
	wg.Wait()
	close(stop)
	st := m.Stats()
	if st.Events+st.Dropped != burstEvents {
		t.Fatalf("shown %d + dropped %d = %d, want %d", st.Events, st.Dropped, st.Events+st.Dropped, burstEvents)
	}
	if st.Events == 0 {
		t.Fatal("the view showed nothing")
	}
	grown := int64(heapAfterGC()) - int64(base)
	if limit := int64(DefaultWindowBytes + DefaultLiveCapacity*200); grown > limit {
		t.Fatalf("heap grew %d MiB, more than the window and one ring (%d MiB)", grown>>20, limit>>20)
	}
	if m.agg.sched.Observations != st.Events {
		t.Fatalf("aggregated %d scheduler lines, shown %d", m.agg.sched.Observations, st.Events)
	}
	t.Logf("running view: shown %d, dropped %d, heap +%d MiB", st.Events, st.Dropped, grown>>20)
}
