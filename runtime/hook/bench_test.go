package hook

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
)

// smallEvents is the high-rate mix: replay and sched, alternating, with the
// envelope a producer sends (no src, no run: the collector fills them).
func smallEvents(n int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		if i%2 == 0 {
			evs[i] = Event{Kind: KindReplay, TS: 1_700_000_000_000_000_000 + int64(i),
				Body: &Replay{Step: uint64(i), BatchSize: 32, Bucket: 32, Mode: "graph", DurNS: 41_000}}
		} else {
			evs[i] = Event{Kind: KindSched, TS: 1_700_000_000_000_000_000 + int64(i),
				Body: &Sched{Phase: "decode", RunningReq: 31, QueueReq: 2, Tokens: 90_000, TokenUsage: 0.71, CUDAGraph: true, GenThroughput: 1234.5}}
		}
	}
	return evs
}

// loopReader replays b forever.
type loopReader struct {
	b   []byte
	off int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.off:])
		n += c
		r.off = (r.off + c) % len(r.b)
	}
	return n, nil
}

func BenchmarkFrameDecode(b *testing.B) {
	var stream []byte
	for _, ev := range smallEvents(1024) {
		stream, _ = AppendFrame(stream, ev)
	}
	d := NewFrameDecoder(&loopReader{b: stream})
	b.SetBytes(int64(len(stream) / 1024))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := d.Decode(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkFrameEncode(b *testing.B) {
	evs := smallEvents(1024)
	buf := make([]byte, 0, 1<<16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		var err error
		buf, err = AppendFrame(buf[:0], evs[i%len(evs)])
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkJSONLinesDecode(b *testing.B) {
	var stream []byte
	for _, ev := range smallEvents(1024) {
		line, _ := json.Marshal(ev)
		stream = append(append(stream, line...), '\n')
	}
	d := NewJSONLinesDecoder(&loopReader{b: stream})
	b.SetBytes(int64(len(stream) / 1024))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := d.Decode(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkJSONLinesDecodeStdlib is the reference: Event.UnmarshalJSON per line.
func BenchmarkJSONLinesDecodeStdlib(b *testing.B) {
	var lines [][]byte
	for _, ev := range smallEvents(1024) {
		line, _ := json.Marshal(ev)
		lines = append(lines, line)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		var ev Event
		if err := ev.UnmarshalJSON(lines[i%len(lines)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

var _ = bytes.NewReader
var _ = io.EOF
