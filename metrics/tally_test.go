package metrics

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// value sums the gathered series of family name whose labels include want.
func value(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) (float64, int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var sum float64
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			n++
			sum += metricValue(m)
		}
	}
	return sum, n
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// twinRun runs a small twin workload with transfer-race through the
// analyzers into tally and returns the run's result and its analyzers.
func twinRun(t testing.TB, sessions int, next hook.Publisher) (sim.Result, []hook.Analyzer) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Inject = []string{"transfer-race"}
	cfg.Instruments = sim.AllInstruments()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	as := analyzers.All(analyzers.Options{WarmupMaxSeqLen: sim.WarmupSeqLen})
	w := sim.DefaultWorkload()
	w.Sessions, w.Rounds = sessions, 3
	w.Judge = outcome.Classifier{}.Outcome
	res, err := sim.Run(context.Background(), cfg, w, hook.WithRun(hook.WithAnalyzers(next, as...), "twin-1"))
	if err != nil {
		t.Fatalf("twin run: %v", err)
	}
	return res, as
}

// The scrape says what the run's own report says: sessions by outcome as
// sim.Result counts them, rooms, canary pages and divergent samples as the
// analyzers' summaries (the sections of sim run --json).
func TestTallyAgreesWithTheRunReport(t *testing.T) {
	var tally *Tally
	pub := hook.PublishFunc(func(ev hook.Event) { tally.Publish(ev) })
	tally = NewTally(Options{Run: "twin-1"})
	// 16 sessions; 6 under -race, where the twin's index-K arithmetic is
	// most of the package's time and the tally's locking is exercised by
	// every event all the same (the scrape must still match a run with
	// room mismatches: the test fails without one).
	sessions := 16
	if raceEnabled {
		sessions = 6
	}
	res, as := twinRun(t, sessions, pub)
	tally.opts.Analyzers = as
	reg := Registry(tally)

	outcomes := map[string]int{}
	for _, s := range res.PerSession {
		outcomes[s.Outcome]++
	}
	for _, o := range hook.Outcomes {
		got, n := value(t, reg, "kvcanary_sessions_total", map[string]string{"outcome": o, "run": "twin-1"})
		if n == 0 || got != float64(outcomes[o]) {
			t.Errorf("sessions{outcome=%q} = %v (%d series), report says %d", o, got, n, outcomes[o])
		}
	}
	sums := analyzers.SetOf(as...).Summaries()
	cs, cn, gd := *sums.Checksum, *sums.Canary, *sums.Graphdiff
	if cs.Mismatched == 0 {
		t.Fatalf("transfer-race gave no room mismatch: %+v", cs)
	}
	live := cn.LivePageOverwrites
	if cn.Between != nil {
		live += cn.Between.LivePageOverwrites
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kvcanary_room_compares", map[string]string{"class": "match"}, float64(cs.Matched)},
		{"kvcanary_room_compares", map[string]string{"class": "mismatch"}, float64(cs.Mismatched)},
		{"kvcanary_room_compares", map[string]string{"class": "warmup"}, float64(cs.Warmup)},
		{"kvcanary_room_compares", map[string]string{"class": "one_side"}, float64(cs.Missing)},
		{"kvcanary_room_mismatches_total", nil, float64(cs.Mismatched)},
		{"kvcanary_live_page_overwrites_total", nil, float64(live)},
		{"kvcanary_canary_pages_total", map[string]string{"class": "expected-store", "phase": "replay"}, float64(cn.ExpectedWrites)},
		{"kvcanary_canary_pages_total", map[string]string{"class": "LIVE-PAGE-OVERWRITE", "phase": "replay"}, float64(cn.LivePageOverwrites)},
		{"kvcanary_graphdiff_divergent_samples_total", nil, float64(gd.Divergent)},
		{"kvcanary_graphdiff_samples_total", nil, float64(gd.Samples)},
		{"kvcanary_replays_total", nil, float64(cn.Replays)},
		{"kvcanary_findings_total", map[string]string{"analyzer": "checksum", "class": "mismatch"}, float64(cs.Mismatched)},
		{"kvcanary_findings_total", map[string]string{"analyzer": "graphdiff"}, float64(gd.Divergent)},
	}
	for _, c := range checks {
		got, n := value(t, reg, c.name, c.labels)
		if n == 0 || got != c.want {
			t.Errorf("%s%v = %v (%d series), report says %v", c.name, c.labels, got, n, c.want)
		}
	}
	if live == 0 {
		t.Log("note: this twin run had no live-page overwrite")
	}
}

// Labels never carry ids: a request, room or session id in any field of any
// event leaves no label value behind; unknown classes fold into "other"; past
// MaxSources distinct sources, events count under the overflow source.
func TestLabelsAreBounded(t *testing.T) {
	tally := NewTally(Options{Run: "r", MaxSources: 3})
	for i, host := range []string{"a", "b", "c", "d", "e"} {
		tally.Publish(hook.Event{Kind: hook.KindSession, Src: hook.Source{Node: host, PID: int32(i)},
			Body: &hook.Session{ID: "sess-SECRET", Outcome: "weird-outcome", Requests: []string{"req-SECRET"}}})
		tally.Publish(hook.Event{Kind: hook.KindRoomChecksum, Src: hook.Source{Node: host},
			Body: &hook.RoomChecksum{Room: 987654321, Side: hook.SidePrefill, Request: "req-SECRET"}})
		tally.Publish(hook.Event{Kind: hook.KindFinding, Src: hook.Source{Node: host},
			Body: &hook.Finding{Analyzer: "made-up", Severity: "catastrophic", Summary: "room 987654321", Evidence: map[string]string{"class": "req-SECRET"}}})
		tally.Publish(hook.Event{Kind: hook.KindReplay, Src: hook.Source{Node: host}, Body: &hook.Replay{Mode: "req-SECRET"}})
	}
	reg := Registry(tally)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v := lp.GetValue(); strings.Contains(v, "SECRET") || strings.Contains(v, "987654321") || strings.Contains(v, "weird") || strings.Contains(v, "made-up") {
					t.Errorf("%s: label %s=%q carries a producer's value", mf.GetName(), lp.GetName(), v)
				}
			}
		}
	}
	if got, _ := value(t, reg, "kvcanary_sessions_total", map[string]string{"outcome": "other"}); got != 5 {
		t.Errorf("sessions{outcome=other} = %v, want 5", got)
	}
	if got, _ := value(t, reg, "kvcanary_findings_total", map[string]string{"analyzer": "other", "severity": "other", "class": "other"}); got != 5 {
		t.Errorf("findings{other} = %v, want 5", got)
	}
	if got, _ := value(t, reg, "kvcanary_events_total", map[string]string{"host": OverflowHost}); got != 8 {
		t.Errorf("events of the overflow source = %v, want 8 (hosts d and e, 4 events each)", got)
	}
	if got, _ := value(t, reg, "kvcanary_metrics_source_overflow_events_total", nil); got != 8 {
		t.Errorf("overflow counter = %v, want 8", got)
	}
	if _, n := value(t, reg, "kvcanary_events_total", map[string]string{"host": "d"}); n != 0 {
		t.Errorf("host d has %d series past MaxSources 3", n)
	}
}

// Collector counters, drop counters of this process and producer drops.
func TestCollectorAndDrops(t *testing.T) {
	tally := NewTally(Options{Run: "r"})
	tally.SetCollector(func() hook.Stats {
		return hook.Stats{Connections: 3, Open: 1, Bytes: 100, RejectedBy: map[string]uint64{"bad_json": 2}, RefusedBy: map[string]uint64{"conn_limit": 1}}
	})
	tally.AddDropCounter("otlp_queue", func() uint64 { return 7 })
	tally.Publish(hook.Event{Kind: hook.KindRunEnd, Src: hook.Source{Node: "h1"}, Run: "p", Body: &hook.RunEnd{Dropped: 4}})
	reg := Registry(tally)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kvcanary_collector_connections_total", nil, 3},
		{"kvcanary_collector_connections_open", nil, 1},
		{"kvcanary_collector_received_bytes_total", nil, 100},
		{"kvcanary_events_rejected_total", map[string]string{"reason": "bad_json"}, 2},
		{"kvcanary_collector_connections_refused_total", map[string]string{"reason": "conn_limit"}, 1},
		{"kvcanary_events_dropped_total", map[string]string{"reason": "otlp_queue", "run": "p"}, 7}, // the one run the events came from
		{"kvcanary_events_dropped_total", map[string]string{"reason": "producer", "host": "h1", "run": "p"}, 4},
		{"kvcanary_events_total", map[string]string{"kind": "run.end", "host": "h1", "run": "p"}, 1},
	} {
		if got, n := value(t, reg, c.name, c.labels); n == 0 || got != c.want {
			t.Errorf("%s%v = %v (%d series), want %v", c.name, c.labels, got, n, c.want)
		}
	}
}

// Serve answers GET /metrics in the text exposition format with every family's HELP.
func TestServe(t *testing.T) {
	tally := NewTally(Options{Run: "r"})
	tally.Publish(hook.Event{Kind: hook.KindReplay, Body: &hook.Replay{Mode: "graph"}})
	tally.Publish(hook.Event{Kind: hook.KindReplay, Src: hook.Source{Node: "gpu-b", Role: "decode", Rank: 3}, Body: &hook.Replay{Mode: "eager"}})
	srv, err := Serve("127.0.0.1:0", tally)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	text := string(body)
	for _, want := range []string{
		`kvcanary_replays_total{host="",mode="graph",rank="",role="",run="r"} 1`,
		`kvcanary_replays_total{host="gpu-b",mode="eager",rank="3",role="decode",run="r"} 1`,
		"# HELP kvcanary_events_total", "# TYPE kvcanary_replays_total counter", "go_goroutines",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if _, err := Serve(srv.Addr(), tally); err == nil || !strings.Contains(err.Error(), srv.Addr()) {
		t.Errorf("second Serve on a busy address: %v, want an error naming it", err)
	}
}
