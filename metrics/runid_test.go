package metrics

import (
	"testing"

	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// One run, one run id: a collector (run "collect-1") judging the events of
// one producer's run ("wrap-7") labels its per-run families (the analyzers',
// its connection counters) with the producer's run id, the one its events
// carry. Events of a second run leave those families under the
// collector's own id: they judge both runs together.
func TestPerRunFamiliesCarryTheEventsRunID(t *testing.T) {
	an := checksum.NewAnalyzer(checksum.Options{})
	tally := NewTally(Options{Run: "collect-1", Analyzers: []hook.Analyzer{an}})
	tally.SetCollector(func() hook.Stats { return hook.Stats{Connections: 1} })
	reg := Registry(tally)
	room := func(run, side string) hook.Event {
		return hook.Event{Kind: hook.KindRoomChecksum, Run: run, Src: hook.Source{Node: "h1", Role: side, Proc: "sglang"},
			Body: &hook.RoomChecksum{Room: 42, Side: hook.Side(side), SeqLen: 1000, Pages: 16, Bsum: 1, XXH3: 2}}
	}
	for _, side := range []string{"prefill", "decode"} {
		ev := room("wrap-7", side)
		an.Observe(ev, func(hook.Event) {})
		tally.Publish(ev)
	}
	for _, c := range []struct {
		name string
		lbl  map[string]string
		want float64
	}{
		{"kvcanary_events_total", map[string]string{"run": "wrap-7", "kind": "room.checksum"}, 2},
		{"kvcanary_room_compares", map[string]string{"run": "wrap-7", "class": "match"}, 1},
		{"kvcanary_collector_connections_total", map[string]string{"run": "wrap-7"}, 1},
	} {
		if got, n := value(t, reg, c.name, c.lbl); n == 0 || got != c.want {
			t.Errorf("%s%v = %v (%d series), want %v", c.name, c.lbl, got, n, c.want)
		}
	}
	if _, n := value(t, reg, "kvcanary_room_compares", map[string]string{"run": "collect-1"}); n != 0 {
		t.Errorf("rooms under the collector's run id too: %d series", n)
	}
	tally.Publish(room("other-run", "prefill"))
	if got, n := value(t, reg, "kvcanary_collector_connections_total", map[string]string{"run": "collect-1"}); n == 0 || got != 1 {
		t.Errorf("two runs: connections under the collector's id %v (%d series)", got, n)
	}
}
