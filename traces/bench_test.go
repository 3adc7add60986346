package traces

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cputime"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// benchEvents is a realistic mix: mostly room checksums and replays, some
// canary pages, sched and gpu samples.
func benchEvents(n int) []hook.Event {
	evs := make([]hook.Event, n)
	src := hook.Source{Node: "gpu-7", Proc: "sglang-decode", PID: 4242}
	for i := range evs {
		ts := 1_796_202_000_000_000_000 + int64(i)*1733
		var b hook.Body
		switch i % 10 {
		case 0, 1, 2, 3:
			b = &hook.RoomChecksum{Room: hook.Dec64(uint64(i) * 0x9e3779b97f4a7c15), Side: hook.SideDecode, SeqLen: 4000 + i%512, Pages: 63 + i%8, Bsum: hook.Hex64(uint64(i) * 0xbf58476d1ce4e5b9), XXH3: hook.Hex64(uint64(i) * 0x94d049bb133111eb)}
		case 4, 5, 6:
			b = &hook.Replay{Step: uint64(i), BatchSize: 1 + i%160, Bucket: 160, Mode: "graph", DurNS: int64(9000 + i%777)}
		case 7:
			b = &hook.CanaryPages{Step: uint64(i), Policy: "live", PagesTotal: 4096, PagesChecked: 512, Expected: []uint32{uint32(i % 4096), uint32(i%4096 + 1)}, Running: []string{"req-a", "req-b"}}
		case 8:
			b = &hook.Sched{Phase: "decode", RunningReq: i % 64, QueueReq: i % 7, Tokens: i % 100000, TokenUsage: 0.5, CUDAGraph: true}
		case 9:
			b = &hook.GPU{Devices: []hook.GPUDevice{{Index: 0, MemUsed: 1 << 36, MemTotal: 1 << 37, UtilGPU: 97, UtilMem: 40, TempC: 70}}}
		}
		evs[i] = hook.Event{Kind: b.Kind(), TS: ts, Src: src, Run: "r-bench", Body: b}
	}
	return evs
}

// benchLines is benchEvents pre-encoded in the JSON-lines form.
func benchLines(evs []hook.Event) (lines [][]byte, total int) {
	for _, ev := range evs {
		l, err := ev.MarshalJSON()
		if err != nil {
			panic(err)
		}
		lines = append(lines, l)
		total += len(l) + 1
	}
	return lines, total
}

const benchN = 20000

// BenchmarkWrite measures the bundle layer in steady state (one long-lived
// writer, as in a recording): JSON lines in, zstd frames out (WriteLine), and
// the whole path from events (Write, which also encodes the JSON). One op
// writes benchN events; the figure is MB/s of JSON-line bytes, by wall clock
// and per CPU second of the process (both goroutines).
func BenchmarkWrite(b *testing.B) {
	evs := benchEvents(benchN)
	lines, total := benchLines(evs)
	run := func(b *testing.B, write func(w *Writer, i int) error) {
		cw := &countWriter{}
		w, err := newWriter(cw, "bench", testManifest, 0, time.Now)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(total))
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cputime.Process()
		for i := 0; i < b.N; i++ {
			for j := range evs {
				if err := write(w, j); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
		if cpu := cputime.Process() - cpu0; cpu > 0 {
			b.ReportMetric(float64(total)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
		}
		b.ReportMetric(float64(total)*float64(b.N)/float64(cw.n), "ratio")
	}
	b.Run("lines", func(b *testing.B) {
		run(b, func(w *Writer, j int) error { return w.WriteLine(evs[j].Kind, evs[j].TS, lines[j]) })
	})
	b.Run("events", func(b *testing.B) {
		run(b, func(w *Writer, j int) error { return w.Write(evs[j]) })
	})
}

// BenchmarkRead measures reading a bundle: frames decoded and split into
// lines (NextLine without validation: the bundle layer), with JSON
// validation (what trace cat and inspect do), and fully decoded events
// (Next). The figure is GB/s of JSON-line bytes.
func BenchmarkRead(b *testing.B) {
	evs := benchEvents(5 * benchN) // about 24 MB of JSON, so per-reader setup is amortized
	lines, total := benchLines(evs)
	var buf bytes.Buffer
	w, err := newWriter(&buf, "bench", testManifest, 0, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	for j := range evs {
		if err := w.WriteLine(evs[j].Kind, evs[j].TS, lines[j]); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	run := func(b *testing.B, validate bool, next func(r *Reader) error) {
		b.SetBytes(int64(total))
		b.ReportAllocs()
		cpu0 := cputime.Process()
		for i := 0; i < b.N; i++ {
			r, err := NewReader(bytes.NewReader(data))
			if err != nil {
				b.Fatal(err)
			}
			r.SetValidate(validate)
			n := 0
			for {
				if err := next(r); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != len(evs) {
				b.Fatalf("read %d events, want %d", n, len(evs))
			}
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		if cpu := cputime.Process() - cpu0; cpu > 0 {
			b.ReportMetric(float64(total)*float64(b.N)/cpu.Seconds()/1e9, "GB/cpu-s")
		}
	}
	nextLine := func(r *Reader) error { _, _, _, err := r.NextLine(); return err }
	b.Run("lines", func(b *testing.B) { run(b, false, nextLine) })
	b.Run("lines-validated", func(b *testing.B) { run(b, true, nextLine) })
	b.Run("events", func(b *testing.B) {
		run(b, true, func(r *Reader) error { _, err := r.Next(); return err })
	})
}

type countWriter struct{ n int }

func (c *countWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

// BenchmarkCodec is the ceiling: the shared zstd encoder and decoder alone on
// the same JSON, in 1 MiB frames, with no bundle logic around them.
func BenchmarkCodec(b *testing.B) {
	evs := benchEvents(benchN)
	lines, total := benchLines(evs)
	plain := make([]byte, 0, total)
	for _, l := range lines {
		plain = append(append(plain, l...), '\n')
	}
	enc, _ := encoder()
	dec, _ := decoder()
	var frames [][]byte
	for off := 0; off < len(plain); off += frameBytes {
		frames = append(frames, enc.EncodeAll(plain[off:min(off+frameBytes, len(plain))], nil))
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(total))
		var dst []byte
		cpu0 := cputime.Process()
		for i := 0; i < b.N; i++ {
			for off := 0; off < len(plain); off += frameBytes {
				dst = enc.EncodeAll(plain[off:min(off+frameBytes, len(plain))], dst[:0])
			}
		}
		if cpu := cputime.Process() - cpu0; cpu > 0 {
			b.ReportMetric(float64(total)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(total))
		var dst []byte
		var err error
		cpu0 := cputime.Process()
		for i := 0; i < b.N; i++ {
			for _, f := range frames {
				if dst, err = dec.DecodeAll(f, dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
		}
		if cpu := cputime.Process() - cpu0; cpu > 0 {
			b.ReportMetric(float64(total)*float64(b.N)/cpu.Seconds()/1e9, "GB/cpu-s")
		}
	})
}
