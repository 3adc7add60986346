package hook

import (
	"sync"
	"testing"
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
	if len(got) != 100 || got[0] != 1 || got[99] != 100 {
		t.Fatalf("lossless got %d events (first %v), want 100 in order", len(got), got[:1])
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
func (c *countAnalyzer) Summary() any { return c.n }

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
