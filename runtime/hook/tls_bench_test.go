package hook

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkIngest is one producer, end to end, the same bytes over two
// transports: a plain Unix socket and mTLS (TLS 1.3, client certificate)
// over loopback TCP. The producer pre-encodes small binary frames
// (AppendFrame, 60 KiB writes); the collector decodes, fills the envelope
// (the certificate CN as src.node under TLS) and publishes. Timing stops
// when the last event has been published; events/s is wall time (the
// producer and the collector share the machine's cores).
func BenchmarkIngest(b *testing.B) {
	b.Run("unix", func(b *testing.B) {
		c, err := Listen("unix://"+filepath.Join(b.TempDir(), "c.sock"), ListenOptions{Run: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		benchIngest(b, c, func() (net.Conn, error) {
			return net.Dial("unix", strings.TrimPrefix(c.Addr(), "unix://"))
		})
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
		})
	})
}

func benchIngest(b *testing.B, c *Collector, dial func() (net.Conn, error)) {
	var got atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Serve(ctx, PublishFunc(func(Event) { got.Add(1) }))
	nc, err := dial()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	evs := smallEvents(1024)
	buf := append(make([]byte, 0, 64<<10), FramePreamble...)
	cpu0 := processCPUSeconds()
	b.ResetTimer()
	for i := range b.N {
		buf, _ = AppendFrame(buf, evs[i%len(evs)])
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
