package hook

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/testenv"
)

// Issue 27 D4: connections that never start TLS have a budget of their own
// (handshakes at once, per address, a timeout) and do not count toward
// MaxConns. Before, ~1,030 such connections held every one of the 1024 slots
// for the handshake timeout and 5 of 5 legitimate mTLS producers were
// refused. Loopback only; the flood is bounded and closed by the test.
func TestTLSProducersServedDuringUnauthenticatedFlood(t *testing.T) {
	s := newTLSSetup(t)
	// A handshake timeout longer than the test: only the budget can let the
	// producers in while the flood holds its connections.
	c, rec := startCollectorAt(t, "tcp://127.0.0.1:0", ListenOptions{TLS: s.server, Run: "r", HandshakeTimeout: time.Minute})
	addr := strings.TrimPrefix(c.Addr(), "tcp://")

	const flood = 1030
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var held []net.Conn
	t.Cleanup(func() {
		for _, nc := range held {
			nc.Close()
		}
	})
	for i := 0; i < flood; i++ {
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			if i == 0 {
				t.Skipf("cannot dial from 127.0.0.2 (%v): the flood needs a second loopback address", err)
			}
			t.Fatalf("flood connection %d: %v", i, err)
		}
		held = append(held, nc) // never starts TLS
	}
	testenv.WaitFor(t, "the flood accepted", func() bool { return c.Stats().Refused >= flood-DefaultMaxConns })

	now := time.Now()
	const producers, events = 5, 10
	var wg sync.WaitGroup
	for p := range producers {
		cfg := s.client(t, s.issue(t, s.ca, fmt.Sprintf("producer-%d", p), now.Add(-time.Hour), now.Add(time.Hour)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(testenv.HangGuard)
			for time.Now().Before(deadline) { // a producer redials until served, as the emitters do
				tc, err := tlsDial(addr, cfg)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				for i := range events {
					fmt.Fprintf(tc, `{"v":1,"kind":"replay","ts_ns":%d,"body":{"step":%d,"mode":"graph"}}`+"\n", i+1, i)
				}
				tc.Close()
				return
			}
		}()
	}
	wg.Wait()
	testenv.WaitForState(t, "every producer's events", func() bool { return len(rec.events()) == producers*events }, func() any { return c.Stats() })
	served := map[string]int{}
	for _, ev := range rec.events() {
		served[ev.Src.Node]++
	}
	for p := range producers {
		if n := served[fmt.Sprintf("producer-%d", p)]; n != events {
			t.Errorf("producer-%d: %d of %d events arrived", p, n, events)
		}
	}
	st := c.Stats()
	t.Logf("flood of %d: refused %v; %d producers served", flood, st.RefusedBy, len(served))
	if st.RefusedBy["handshake_per_addr"] < flood-DefaultMaxHandshakesPerAddr || st.RefusedBy["conn_limit"] != 0 {
		t.Errorf("refused by %v: want the flood refused as handshake_per_addr, no producer as conn_limit", st.RefusedBy)
	}
}

func tlsDial(addr string, cfg *tls.Config) (*tls.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
}
