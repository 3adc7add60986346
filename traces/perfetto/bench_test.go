package perfetto_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/cputime"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
	"github.com/kvcanary/kvcanary/traces/perfetto"
)

// Export benchmarks: MB of bundle (compressed file bytes) per second and the
// peak live heap while exporting, for the demo's 80×4 baseline and a large
// synthetic bundle. Memory must not grow with the bundle.
//
//	go test ./traces/perfetto -run '^$' -bench Export -benchtime 3x
//	KVCANARY_BENCH_BUNDLE=/tmp/demo/baseline.kvtrace  (use an existing demo baseline)
//	KVCANARY_BENCH_MB=1024                             (size of the synthetic bundle; default 256)

var (
	benchDir     string
	benchDirOnce sync.Once
	baseOnce     sync.Once
	basePath     string
	largeOnce    sync.Once
	largePath    string
)

// TestMain removes the benchmarks' bundles.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

func benchTemp(b *testing.B) string {
	benchDirOnce.Do(func() {
		d, err := os.MkdirTemp("", "kvcanary-perfetto-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchDir = d
	})
	return benchDir
}

// demoBaseline records the demo's baseline run (80 sessions × 4 rounds,
// every instrument, the analyzers' findings), as `kvcanary demo` does.
func demoBaseline(b *testing.B) string {
	if p := os.Getenv("KVCANARY_BENCH_BUNDLE"); p != "" {
		return p
	}
	baseOnce.Do(func() {
		path := filepath.Join(benchTemp(b), "baseline.kvtrace")
		cfg := sim.DefaultConfig()
		cfg.Seed = 1
		rec, err := traces.Create(path, traces.Manifest{Config: cfg.RunConfig(), Command: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		wl := sim.DefaultWorkload()
		wl.Judge = outcome.Classifier{}.Outcome
		var werr error
		write := hook.PublishFunc(func(ev hook.Event) {
			if err := rec.Write(ev); err != nil && werr == nil {
				werr = err
			}
		})
		pub := hook.WithAnalyzers(write, analyzers.All(analyzers.Options{WarmupMaxSeqLen: sim.WarmupSeqLen})...)
		if _, err := sim.Run(context.Background(), cfg, wl, pub); err != nil || werr != nil {
			b.Fatal(err, werr)
		}
		if err := rec.Close(); err != nil {
			b.Fatal(err)
		}
		basePath = path
	})
	return basePath
}

// largeBundle writes a synthetic bundle of about KVCANARY_BENCH_MB MB: a
// real deployment's mix per decode step — a replay, canary pages, graphdiff
// samples with 2048-position logit vectors, room checksums, CUDA calls on two
// streams with an event record/wait, and a sched sample every 40 steps.
func largeBundle(b *testing.B) string {
	largeOnce.Do(func() {
		mb := 256
		if s := os.Getenv("KVCANARY_BENCH_MB"); s != "" {
			if v, err := strconv.Atoi(s); err == nil && v > 0 {
				mb = v
			}
		}
		path := filepath.Join(benchTemp(b), "large.kvtrace")
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		w, err := traces.NewWriter(f, traces.Manifest{Command: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		engine := hook.Source{Node: "gpu-7", Proc: "sglang-decode", PID: 4242}
		probe := hook.Source{Node: "gpu-7", Proc: "cudaprobe", PID: 4242}
		x := uint64(0x9e3779b97f4a7c15)
		rnd := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
		vec := func(n int) hook.Float32s {
			v := make(hook.Float32s, n)
			for i := range v {
				v[i] = float32(int16(rnd())) / 4096 // bf16-like: few distinct mantissas
			}
			return v
		}
		put := func(src hook.Source, ts int64, body hook.Body) {
			if err := w.Write(hook.Event{Kind: body.Kind(), TS: ts, Src: src, Body: body}); err != nil {
				b.Fatal(err)
			}
		}
		ts := int64(1_796_202_000_000_000_000)
		for step := uint64(1); ; step++ {
			if step%256 == 0 {
				if st, _ := f.Stat(); st.Size() >= int64(mb)<<20 {
					break
				}
			}
			ts += 25_000_000
			bs := 1 + int(step%48)
			put(engine, ts, &hook.Replay{Step: step, BatchSize: bs, Bucket: bs + bs%4, Mode: "graph", DurNS: 25_000_000})
			pages := make([]hook.PageChange, bs)
			for i := range pages {
				pages[i] = hook.PageChange{Page: uint32(rnd() % 4096), Owner: "req-" + strconv.Itoa(i), Before: hook.Hex64(rnd()), After: hook.Hex64(rnd())}
			}
			put(engine, ts, &hook.CanaryPages{Step: step, Policy: "live", PagesTotal: 4096, PagesChecked: 800, Changed: pages})
			for r := range 4 {
				put(engine, ts, &hook.GraphDiffSample{Step: step, Request: "req-" + strconv.Itoa(r), Dtype: "bf16", Graph: vec(2048), Eager: vec(2048), K: 64, SeqLen: 2048})
			}
			room := hook.Dec64(rnd())
			sum := hook.Hex64(rnd())
			put(engine, ts-1_000_000, &hook.RoomChecksum{Room: room, Side: hook.SidePrefill, SeqLen: 2000, Pages: 32, Bsum: sum, XXH3: sum})
			put(engine, ts, &hook.RoomChecksum{Room: room, Side: hook.SideDecode, SeqLen: 2000, Pages: 32, Bsum: sum, XXH3: sum})
			for i, c := range []struct {
				call   string
				stream uint64
				arg    uint64
			}{{"cuGraphLaunch", 0xA0, 0}, {"cuEventRecord", 0xA0, 0xE1}, {"cuStreamWaitEvent", 0xB0, 0xE1}, {"cuLaunchKernel", 0xB0, 0xF1}} {
				t0 := ts + int64(i)*10_000
				put(probe, t0, &hook.CUDA{Call: c.call, PID: 4242, TID: 7, Stream: hook.Hex64(c.stream), GraphExec: 0x6110, Arg: hook.Hex64(c.arg), StartNS: t0, EndNS: t0 + 4000})
			}
			if step%40 == 0 {
				put(engine, ts, &hook.Sched{Phase: "decode", RunningReq: bs, QueueReq: int(step % 7), Tokens: 90000, TokenUsage: 0.3, CUDAGraph: true})
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		largePath = path
	})
	return largePath
}

// peakHeap samples the live heap every millisecond until stop is closed.
func peakHeap(stop <-chan struct{}, out *uint64, done *sync.WaitGroup) {
	defer done.Done()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(s)
		if v := s[0].Value.Uint64(); v > *out {
			*out = v
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

func benchExport(b *testing.B, path string) {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	b.SetBytes(st.Size())
	b.ResetTimer()
	var peak uint64
	cpu0 := cputime.Process()
	for range b.N {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go peakHeap(stop, &peak, &wg)
		r, err := traces.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		w := perfetto.NewWriter(io.Discard)
		if err := perfetto.Export(r, w); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		r.Close()
		close(stop)
		wg.Wait()
		if w.Stats().Steps == 0 {
			b.Fatal("no steps exported")
		}
	}
	if cpu := cputime.Process() - cpu0; cpu > 0 {
		// Per CPU second of the process (reader's decode-ahead goroutine
		// included): the figure a loaded, shared machine does not skew.
		b.ReportMetric(float64(st.Size())*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(st.Size())/(1<<20), "bundle-MiB")
}

func BenchmarkExportDemoBaseline(b *testing.B) { benchExport(b, demoBaseline(b)) }

func BenchmarkExportLarge(b *testing.B) { benchExport(b, largeBundle(b)) }
