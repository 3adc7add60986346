package hook

import (
	"sync"
	"testing"
	"time"
)

func sched(i int) Event {
	return Event{Kind: KindSched, TS: int64(i), Body: &Sched{RunningReq: i}}
}

func TestBusLosslessSeesEverythingLiveDropsOldest(t *testing.T) {
	b := NewBus()
	ll := b.Lossless("bundle", 4)
	live := b.Live("view", 3)
	var got []int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ev, ok := ll.Recv()
			if !ok {
				return
			}
			got = append(got, ev.TS)
		}
	}()
	for i := 1; i <= 100; i++ {
		b.Publish(sched(i))
	}
	b.Close()
	wg.Wait()
	if len(got) != 100 {
		t.Fatalf("lossless got %d events, want 100", len(got))
	}
	for i, ts := range got {
		if ts != int64(i+1) {
			t.Fatalf("lossless event %d has ts %d, want %d (in publish order)", i, ts, i+1)
		}
	}
	if ll.Delivered() != 100 {
		t.Fatalf("lossless delivered %d, want 100", ll.Delivered())
	}
	evs, open := live.Drain(nil)
	if open {
		t.Fatalf("live subscription still open after Close")
	}
	if len(evs) != 3 || evs[0].TS != 98 || evs[2].TS != 100 {
		t.Fatalf("live kept %v, want the newest three (98..100)", evs)
	}
	if live.Dropped() != 97 {
		t.Fatalf("live dropped %d, want 97", live.Dropped())
	}
	if ll.Dropped() != 0 {
		t.Fatalf("lossless dropped %d", ll.Dropped())
	}
}

type countAnalyzer struct{ n int }

func (c *countAnalyzer) Name() string { return "count" }
func (c *countAnalyzer) Observe(ev Event, emit func(Event)) {
	c.n++
	if c.n%2 == 0 {
		emit(Event{Kind: KindFinding, Body: &Finding{Analyzer: "count", Severity: SevInfo, Summary: "even"}})
	}
}

func TestWithAnalyzersPublishesEventThenFindings(t *testing.T) {
	var out []Event
	a := &countAnalyzer{}
	p := WithAnalyzers(PublishFunc(func(ev Event) { out = append(out, ev) }), a)
	p.Publish(Event{Kind: KindSched, TS: 5, Run: "r1", Body: &Sched{}})
	p.Publish(Event{Kind: KindSched, TS: 7, Run: "r1", Body: &Sched{}})
	if len(out) != 3 {
		t.Fatalf("published %d events, want 3", len(out))
	}
	if out[2].Kind != KindFinding || out[2].TS != 7 || out[2].Run != "r1" {
		t.Fatalf("finding = %+v, want kind finding at ts 7 in run r1", out[2])
	}
}

// TestBusConcurrentPublishersCloseEndsReceivers: with several publishers, a
// lossless consumer gets every event, a live consumer's delivered + dropped
// accounts for every event, and Close ends both receivers (no goroutine is
// left waiting). A subscription made after Close is already ended.
func TestBusConcurrentPublishersCloseEndsReceivers(t *testing.T) {
	const publishers, each = 4, 2000
	b := NewBus()
	ll := b.Lossless("bundle", 16)
	live := b.Live("view", 8)
	var llN, liveN int
	recvDone := make(chan struct{}, 2)
	count := func(s *Subscription, n *int) {
		for {
			if _, ok := s.Recv(); !ok {
				break
			}
			*n++
		}
		recvDone <- struct{}{}
	}
	go count(ll, &llN)
	go count(live, &liveN)
	var wg sync.WaitGroup
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				b.Publish(sched(i))
			}
		}()
	}
	wg.Wait()
	b.Close()
	b.Publish(sched(-1)) // after Close: ignored
	for i := 0; i < 2; i++ {
		select {
		case <-recvDone:
		case <-time.After(10 * time.Second):
			t.Fatal("a receiver did not end after Close")
		}
	}
	const total = publishers * each
	if llN != total || ll.Delivered() != total {
		t.Fatalf("lossless received %d (delivered %d), want %d", llN, ll.Delivered(), total)
	}
	if uint64(liveN) != live.Delivered() || live.Delivered()+live.Dropped() != total {
		t.Fatalf("live received %d, delivered %d + dropped %d, want a sum of %d", liveN, live.Delivered(), live.Dropped(), total)
	}
	late := b.Live("late", 4)
	if _, ok := late.Recv(); ok {
		t.Fatal("a subscription made after Close received an event")
	}
	if _, ok := b.Lossless("late-ll", 1).Recv(); ok {
		t.Fatal("a lossless subscription made after Close received an event")
	}
}
