package otlp

import (
	"bytes"
	"log"
	"net"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/metrics"
)

// Issue 27 D15: against an endpoint that accepts and never answers, Close
// returns within its 1 s deadline (before: 10 s, a 5 s drain then a 5 s
// shutdown) and the SDK's errors reach LastError, not a raw Go log line on
// stderr.
func TestCloseKeepsItsDeadlineAgainstASilentEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	var logged bytes.Buffer
	prev := log.Writer()
	log.SetOutput(&logged)
	defer log.SetOutput(prev)
	s, err := New(Options{Endpoint: "http://" + ln.Addr().String(), Tally: metrics.NewTally(metrics.Options{Run: "r"}),
		FlushInterval: time.Millisecond, MetricInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		s.Publish(finding)
	}
	t0 := time.Now()
	s.Close()
	took := time.Since(t0)
	t.Logf("Close took %v; last error %q", took.Round(time.Millisecond), s.Stats().LastError)
	if took > DefaultCloseTimeout+time.Second { // a hang bound around the 1 s deadline, not a timing target
		t.Errorf("Close took %v, want about %v", took, DefaultCloseTimeout)
	}
	if logged.Len() > 0 {
		t.Errorf("raw log lines on stderr: %q", logged.String())
	}
	if st := s.Stats(); st.Exported+st.Failed+st.Dropped != st.Offered {
		t.Errorf("stats %+v: exported+failed+dropped != offered", st)
	}
}
