package metrics

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cputime"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// eventMix is a twin-like mix: replays, canary pages, room checksums,
// graph-vs-eager samples, sessions and a finding, from two hosts.
func eventMix() []hook.Event {
	var evs []hook.Event
	for i := range 64 {
		node := "prefill-0"
		if i%2 == 1 {
			node = "decode-0"
		}
		src := hook.Source{Node: node, Proc: "sglang", PID: 7}
		evs = append(evs,
			hook.Event{Kind: hook.KindReplay, Run: "r", Src: src, Body: &hook.Replay{Step: uint64(i), Mode: "graph"}},
			hook.Event{Kind: hook.KindCanaryPages, Run: "r", Src: src, Body: &hook.CanaryPages{Step: uint64(i)}},
			hook.Event{Kind: hook.KindRoomChecksum, Run: "r", Src: src, Body: &hook.RoomChecksum{Room: hook.Dec64(i), Side: hook.SideDecode}},
		)
		if i%8 == 0 {
			evs = append(evs, hook.Event{Kind: hook.KindGraphDiffSample, Run: "r", Src: src, Body: &hook.GraphDiffSample{Step: uint64(i)}},
				hook.Event{Kind: hook.KindSession, Run: "r", Src: src, Body: &hook.Session{ID: "s", Outcome: hook.OutcomeDone}})
		}
		if i%32 == 0 {
			evs = append(evs, hook.Event{Kind: hook.KindFinding, Run: "r", Src: src,
				Body: &hook.Finding{Analyzer: "canary", Severity: hook.SevError, Evidence: map[string]string{"class": "LIVE-PAGE-OVERWRITE"}}})
		}
	}
	return evs
}

// BenchmarkTallyPublish is the sink's cost per event on the publisher's
// goroutine (ns/op = ns/event).
func BenchmarkTallyPublish(b *testing.B) {
	t := NewTally(Options{Run: "r"})
	evs := eventMix()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t.Publish(evs[i%len(evs)])
	}
}

// BenchmarkTallyPublishParallel: publishers on every P at once (the
// counters are shared atomics).
func BenchmarkTallyPublishParallel(b *testing.B) {
	t := NewTally(Options{Run: "r"})
	evs := eventMix()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			t.Publish(evs[i%len(evs)])
			i++
		}
	})
}

// BenchmarkIngestScraped is issue 16's /metrics figure: a Go emitter sends
// binary frames over a Unix socket to a collector whose events go to a
// Tally served on /metrics. Each iteration ingests a chunk of events twice,
// once with nobody scraping and once scraped every second (first scrape at
// the chunk's start: a chunk of about half a second gets one scrape, so
// scrapes come about twice as often as Prometheus' 1s interval), and
// reports both rates and their ratio (target ≥ 0.98), and the ratio of
// CPU time per event without and with scraping (cpu-ratio: the same
// question, less at the mercy of other processes). Run with
// -benchtime=8x -count 5 and quote medians.
func BenchmarkIngestScraped(b *testing.B) {
	const chunk = 500_000
	sock := filepath.Join(b.TempDir(), "c.sock")
	c, err := hook.Listen("unix://"+sock, hook.ListenOptions{Run: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	tally := NewTally(Options{Run: "bench"})
	tally.SetCollector(c.Stats)
	var got atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- c.Serve(ctx, hook.PublishFunc(func(ev hook.Event) { tally.Publish(ev); got.Add(1) }))
	}()
	defer func() { cancel(); <-served }()
	srv, err := Serve("127.0.0.1:0", tally)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	em, err := hook.Dial("unix://"+sock, hook.DialOptions{QueueBytes: 1 << 30, FlushTimeout: time.Minute, WriteTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer em.Close()
	evs := eventMix()
	for i := range evs {
		evs[i].TS = 1
	}
	var scrapes atomic.Int64
	// ingest returns the wall-clock rate and this process's CPU time per
	// event (emitter, collector, sink and scraper together): on a shared
	// machine the CPU figure is the steadier one.
	ingest := func(scrape bool) (rate, cpuPerEvent float64) {
		stop := make(chan struct{})
		done := make(chan struct{})
		if scrape {
			go func() {
				defer close(done)
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					resp, err := http.Get("http://" + srv.Addr() + "/metrics")
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						scrapes.Add(1)
					}
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			}()
		} else {
			close(done)
		}
		start, cpu0, want := time.Now(), cputime.Process(), got.Load()+chunk
		for i := range chunk {
			em.Emit(evs[i%len(evs)])
		}
		for got.Load() < want {
			if em.Dropped() > 0 {
				b.Fatalf("emitter dropped %d events", em.Dropped())
			}
			time.Sleep(200 * time.Microsecond)
		}
		d := time.Since(start)
		close(stop)
		<-done
		return chunk / d.Seconds(), float64(cputime.Process()-cpu0) / chunk
	}
	_, _ = ingest(false) // warm up: connection, buffers, sources
	// Pairs of adjacent chunks, their order alternating, so the load of a
	// shared machine drifts over both halves of a pair alike; the ratio is
	// the median of the pairs'.
	var ratios, cpuRatios, withRates, withoutRates []float64
	var scrapeTime time.Duration
	b.ResetTimer()
	for i := range b.N {
		var with, without, withCPU, withoutCPU float64
		t0 := time.Now()
		if i%2 == 0 {
			without, withoutCPU = ingest(false)
			t0 = time.Now()
			with, withCPU = ingest(true)
			scrapeTime += time.Since(t0)
		} else {
			with, withCPU = ingest(true)
			scrapeTime += time.Since(t0)
			without, withoutCPU = ingest(false)
		}
		ratios = append(ratios, with/without)
		cpuRatios = append(cpuRatios, withoutCPU/withCPU)
		withRates = append(withRates, with)
		withoutRates = append(withoutRates, without)
	}
	b.StopTimer()
	b.ReportMetric(median(withoutRates), "events/s-unscraped")
	b.ReportMetric(median(withRates), "events/s-scraped")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(median(cpuRatios), "cpu-ratio")
	b.ReportMetric(float64(scrapes.Load())/scrapeTime.Seconds(), "scrapes/s")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
