package hook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// benchEach times fn(i) for i in [0, b.N): allocations, events/s and
// events/cpu-s, each call one event.
func benchEach(b *testing.B, fn func(i int) error) {
	b.ReportAllocs()
	cpu0 := processCPUSeconds()
	b.ResetTimer()
	for i := range b.N {
		if err := fn(i); err != nil {
			b.Fatal(err)
		}
	}
	report(b, b.N, cpu0)
}

// benchDecode times d decoding a looped stream of n events.
func benchDecode(b *testing.B, stream []byte, n int, newDecoder func(io.Reader) decoder) {
	d := newDecoder(&loopReader{b: stream})
	b.SetBytes(int64(len(stream) / n))
	benchEach(b, func(int) error {
		_, err := d.Decode()
		return err
	})
}

func frameStream(evs []Event) []byte {
	var stream []byte
	for _, ev := range evs {
		stream, _ = AppendFrame(stream, ev)
	}
	return stream
}

func jsonStream(evs []Event) []byte {
	var stream []byte
	for _, ev := range evs {
		line, _ := json.Marshal(ev)
		stream = append(append(stream, line...), '\n')
	}
	return stream
}

func newFrameDecoder(r io.Reader) decoder { return NewFrameDecoder(r) }

func newJSONLinesDecoder(r io.Reader) decoder { return NewJSONLinesDecoder(r) }

// benchLines times decode on the JSON lines of the small-event mix.
func benchLines(b *testing.B, decode func([]byte) (Event, Reason, error)) {
	var lines [][]byte
	for _, ev := range smallEvents(1024) {
		line, _ := json.Marshal(ev)
		lines = append(lines, line)
	}
	benchEach(b, func(i int) error {
		_, _, err := decode(lines[i%len(lines)])
		return err
	})
}

func BenchmarkFrameDecode(b *testing.B) {
	benchDecode(b, frameStream(smallEvents(1024)), 1024, newFrameDecoder)
}

func BenchmarkFrameEncode(b *testing.B) {
	evs := smallEvents(1024)
	buf := make([]byte, 0, 1<<16)
	benchEach(b, func(i int) error {
		var err error
		buf, err = AppendFrame(buf[:0], evs[i%len(evs)])
		return err
	})
}

func BenchmarkJSONLinesDecode(b *testing.B) {
	benchDecode(b, jsonStream(smallEvents(1024)), 1024, newJSONLinesDecoder)
}

// BenchmarkJSONLinesDecodeStdlib is the reference: the encoding/json path
// (what every line the fast path gave up on took before json v2; it now
// decodes only lines json v2 or Validate refuse, to word the error).
func BenchmarkJSONLinesDecodeStdlib(b *testing.B) { benchLines(b, v1DecodeLine) }

// BenchmarkJSONLinesDecodeSlow is the slow path as it runs: what a line the
// fast path does not recognise takes (json v2, then the duplicate-name scan
// and Validate).
func BenchmarkJSONLinesDecodeSlow(b *testing.B) { benchLines(b, slowDecodeLine) }

// report adds events/s (wall clock, the figure the targets name) and
// events/cpu-s (process CPU time, steadier on a shared machine).
func report(b *testing.B, events int, cpu0 float64) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	if cpu := processCPUSeconds() - cpu0; cpu > 0 && cpu0 > 0 {
		b.ReportMetric(float64(events)/cpu, "events/cpu-s")
	}
}

// BenchmarkCollectorUnix is one producer, end to end over a Unix socket: the
// producer encodes small events (AppendFrame) and writes them; the collector
// decodes, fills the envelope and publishes. Timing stops when the last
// event has been published.
func BenchmarkCollectorUnix(b *testing.B) {
	b.ReportAllocs()
	benchUnix(b, FramePreamble, appendSmallFrame())
}

// BenchmarkEmitterToCollectorUnix is the Go emitter feeding a collector as
// fast as Emit returns. Emit never blocks, so what the collector cannot keep
// up with is dropped: events/s counts delivered events, drop% the rest.
func BenchmarkEmitterToCollectorUnix(b *testing.B) {
	c := listenUnixBench(b)
	var got atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Serve(ctx, PublishFunc(func(Event) { got.Add(1) }))
	em, err := Dial(c.Addr(), DialOptions{QueueBytes: 16 << 20, FlushTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	evs := smallEvents(1024)
	cpu0 := processCPUSeconds()
	b.ResetTimer()
	for i := range b.N {
		em.Emit(evs[i%len(evs)])
	}
	em.Close()
	st := em.Stats()
	for got.Load() < int64(st.Sent) {
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	report(b, int(st.Sent), cpu0)
	b.ReportMetric(100*float64(st.Dropped)/float64(b.N), "drop%")
}

// roomLayersEvent is a room.checksum as an SGLang decode hook sends it for
// DeepSeek-V3.2: 61 layer digests, a 4k-token room's 64 page digests.
func roomLayersEvent(room uint64) Event {
	rc := &RoomChecksum{Room: Dec64(room), Side: SideDecode, SeqLen: 4096, Pages: 64, Bsum: Hex64(room * 0x9E3779B97F4A7C15),
		Dtype: "fp8", Rank: 3, Stage: StageAdmitted}
	for l := range 61 {
		rc.Layers = append(rc.Layers, l)
		rc.LayerBsum = append(rc.LayerBsum, Hex64(uint64(l+1)*0x9E3779B97F4A7C15))
	}
	for p := range 64 {
		rc.PageBsum = append(rc.PageBsum, Hex64(uint64(p+7)*0xBF58476D1CE4E5B9))
	}
	return Event{Kind: KindRoomChecksum, TS: 1_700_000_000_000_000_000, Body: rc}
}

func roomLayersEvents(n int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = roomLayersEvent(uint64(i))
	}
	return evs
}

// BenchmarkFrameDecodeRoomLayers decodes multi-layer room checksums (one
// per request and stage: far below the replay/sched rate).
func BenchmarkFrameDecodeRoomLayers(b *testing.B) {
	benchDecode(b, frameStream(roomLayersEvents(64)), 64, newFrameDecoder)
}

// BenchmarkJSONLinesDecodeRoomLayers is the same events as JSON lines (the
// Python hook's encoding).
func BenchmarkJSONLinesDecodeRoomLayers(b *testing.B) {
	benchDecode(b, jsonStream(roomLayersEvents(64)), 64, newJSONLinesDecoder)
}

// BenchmarkCollectorUnixJSON is BenchmarkCollectorUnix with JSON lines.
func BenchmarkCollectorUnixJSON(b *testing.B) {
	evs := smallEvents(1024)
	lines := make([][]byte, len(evs))
	for i, ev := range evs {
		lines[i] = jsonLine(b, ev)
	}
	b.ReportAllocs()
	benchUnix(b, "", func(buf []byte, i int) []byte { return append(buf, lines[i%len(lines)]...) })
}

// BenchmarkIngest is one producer, end to end, the same bytes over two
// transports: a plain Unix socket and mTLS (TLS 1.3, client certificate)
// over loopback TCP. The producer pre-encodes small binary frames
// (AppendFrame, 60 KiB writes); the collector decodes, fills the envelope
// (the certificate CN as src.node under TLS) and publishes. Timing stops
// when the last event has been published; events/s is wall time (the
// producer and the collector share the machine's cores).
func BenchmarkIngest(b *testing.B) {
	b.Run("unix", func(b *testing.B) {
		benchUnix(b, FramePreamble, appendSmallFrame())
	})
	b.Run("tls-tcp", func(b *testing.B) {
		s := newTLSSetup(b)
		c, err := Listen("tcp://127.0.0.1:0", ListenOptions{Run: "bench", TLS: s.server})
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		cfg := s.client(b, s.issue(b, s.ca, "bench-host", now.Add(-time.Hour), now.Add(time.Hour)))
		benchIngest(b, c, func() (net.Conn, error) {
			return tls.Dial("tcp", strings.TrimPrefix(c.Addr(), "tcp://"), cfg)
		}, FramePreamble, appendSmallFrame())
	})
}

func listenUnixBench(b *testing.B) *Collector {
	c, err := Listen("unix://"+filepath.Join(b.TempDir(), "c.sock"), ListenOptions{Run: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// benchUnix is benchIngest over a Unix socket.
func benchUnix(b *testing.B, preamble string, appendMsg func(buf []byte, i int) []byte) {
	c := listenUnixBench(b)
	benchIngest(b, c, func() (net.Conn, error) {
		return net.Dial("unix", strings.TrimPrefix(c.Addr(), "unix://"))
	}, preamble, appendMsg)
}

// appendSmallFrame appends the i-th event of the small mix as a frame
// (encoding is part of what the producer side is timed for).
func appendSmallFrame() func(buf []byte, i int) []byte {
	evs := smallEvents(1024)
	return func(buf []byte, i int) []byte {
		buf, _ = AppendFrame(buf, evs[i%len(evs)])
		return buf
	}
}

// benchIngest writes preamble, then appendMsg(i) for each i in [0, b.N)
// in 60 KiB writes over dial's connection to c, and times until c has
// published the last event.
func benchIngest(b *testing.B, c *Collector, dial func() (net.Conn, error), preamble string, appendMsg func(buf []byte, i int) []byte) {
	var got atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Serve(ctx, PublishFunc(func(Event) { got.Add(1) }))
	nc, err := dial()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	buf := append(make([]byte, 0, 64<<10), preamble...)
	cpu0 := processCPUSeconds()
	b.ResetTimer()
	for i := range b.N {
		buf = appendMsg(buf, i)
		if len(buf) >= 60<<10 {
			if _, err := nc.Write(buf); err != nil {
				b.Fatal(err)
			}
			buf = buf[:0]
		}
	}
	if _, err := nc.Write(buf); err != nil {
		b.Fatal(err)
	}
	for got.Load() < int64(b.N) {
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	report(b, b.N, cpu0)
	if st := c.Stats(); st.Rejected != 0 || st.Refused != 0 {
		b.Fatalf("rejected %d, refused %d", st.Rejected, st.Refused)
	}
}
