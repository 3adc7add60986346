package tui

import (
	"fmt"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// benchMix is a stream shaped like the twin's: replays, canary pages and
// graph-vs-eager samples per step, scheduler lines, sessions and findings.
func benchMix() []hook.Event {
	var evs []hook.Event
	for i := 0; i < 1024; i++ {
		ts := int64(i) * 2000
		var b hook.Body
		switch i % 8 {
		case 0, 1:
			b = &hook.Replay{Step: uint64(i), BatchSize: 16, Bucket: 16, Mode: "graph", DurNS: 40000}
		case 2, 3:
			b = &hook.CanaryPages{Step: uint64(i), Policy: "live", PagesTotal: 4096, PagesChecked: 160}
		case 4, 5:
			b = &hook.GraphDiffSample{Step: uint64(i), Request: "s001-r0", TopKGraph: []int32{1, 2, 3}, TopKEager: []int32{1, 2, 3}, K: 3}
		case 6:
			b = &hook.Sched{Phase: "decode", RunningReq: i % 48, TokenUsage: float64(i%100) / 100}
		case 7:
			if i%64 == 7 {
				b = &hook.Finding{Analyzer: "canary", Severity: hook.SevError, Summary: fmt.Sprintf("LIVE-PAGE-OVERWRITE: step %d", i)}
			} else {
				b = &hook.Session{ID: "s", Outcome: hook.Outcomes[i%len(hook.Outcomes)]}
			}
		}
		evs = append(evs, hook.Event{Kind: b.Kind(), TS: ts, Body: b})
	}
	return evs
}

// publishPaced publishes n events at rate events per second (0: as fast as
// possible) in 1 ms slices and returns the achieved rate.
func publishPaced(bus *hook.Bus, mix []hook.Event, n int, rate float64) float64 {
	start := time.Now()
	const slice = time.Millisecond
	per := int(rate * slice.Seconds())
	sent := 0
	for sent < n {
		k := n - sent
		if rate > 0 {
			k = min(k, per)
		}
		for i := 0; i < k; i++ {
			ev := mix[(sent+i)%len(mix)]
			ev.TS = int64(sent+i) * 2000
			bus.Publish(ev)
		}
		sent += k
		if rate > 0 {
			if due := start.Add(time.Duration(float64(sent) / rate * 1e9)); time.Until(due) > 0 {
				time.Sleep(time.Until(due))
			}
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkIngestWithView: a producer publishes b.N events at 500 k/s (and,
// in the max variants, as fast as it can) into a bus, with no view and with
// the dashboard reading a live subscription on its 100 ms frame tick
// (Update + View each frame, as bubbletea runs them). It reports the rate the
// producer achieved, the fraction of events the view showed, frames per
// second, the view's work per frame (wall ms in Update+View and process CPU
// ms per frame above the no-view run), and ingest_ratio: the producer's rate
// with the view over its rate without.
func BenchmarkIngestWithView(b *testing.B) {
	mix := benchMix()
	for _, target := range []float64{500_000, 0} {
		name := "500k"
		if target == 0 {
			name = "max"
		}
		var base, baseCPU float64
		b.Run(name+"/no-view", func(b *testing.B) {
			bus := hook.NewBus()
			cpu0 := processCPUSeconds()
			b.ResetTimer()
			base = publishPaced(bus, mix, b.N, target)
			b.StopTimer()
			baseCPU = (processCPUSeconds() - cpu0) / float64(b.N)
			bus.Close()
			b.ReportMetric(base, "events/s")
		})
		b.Run(name+"/view", func(b *testing.B) {
			bus := hook.NewBus()
			sub := bus.Live("tui", DefaultLiveCapacity)
			m := New(Options{Sub: sub, Styles: asciiStyles()})
			m.Update(teaSize(120, 40))
			done := make(chan struct{})
			var frames int
			var work time.Duration
			go func() {
				defer close(done)
				for {
					msg := m.tick()()
					t0 := time.Now()
					m.Update(msg)
					_ = m.View()
					work += time.Since(t0)
					frames++
					if !msg.(frameMsg).open {
						return
					}
				}
			}()
			cpu0 := processCPUSeconds()
			start := time.Now()
			b.ResetTimer()
			got := publishPaced(bus, mix, b.N, target)
			bus.Close()
			<-done
			b.StopTimer()
			el := time.Since(start).Seconds()
			cpu := processCPUSeconds() - cpu0
			st := m.Stats()
			b.ReportMetric(got, "events/s")
			b.ReportMetric(float64(st.Events)/float64(b.N), "shown_ratio")
			b.ReportMetric(float64(frames)/el, "frames/s")
			if frames > 0 {
				b.ReportMetric(work.Seconds()*1e3/float64(frames), "view_ms/frame")
				if baseCPU > 0 {
					extra := cpu - baseCPU*float64(b.N)
					b.ReportMetric(extra*1e3/float64(frames), "cpu_ms/frame")
				}
			}
			if base > 0 {
				b.ReportMetric(got/base, "ingest_ratio")
			}
		})
	}
}

func teaSize(w, h int) tea.WindowSizeMsg { return tea.WindowSizeMsg{Width: w, Height: h} }
