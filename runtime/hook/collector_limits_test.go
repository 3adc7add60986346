package hook

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/testenv"
)

// liveHeap is the bytes of live heap objects after a collection.
func liveHeap() int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

func connStats(c *Collector) []ConnStats { return c.Stats().Conns }

// A 3 MiB JSON line of '<' is a legal line but an 18 MiB bundle line: the
// collector refuses it at ingest, counted per connection, instead of
// publishing an event the bundle writer would drop.
func TestCollectorRefusesWhatABundleCannotHold(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{})
	line := `{"v":1,"kind":"finding","ts_ns":1,"body":{"severity":"info","summary":"` + strings.Repeat("<", 3<<20) + `"}}` + "\n"
	nc := dialRaw(t, c)
	if _, err := io.WriteString(nc, line+string(jsonLine(t, replayEvent(2)))); err != nil {
		t.Fatal(err)
	}
	// The same as a binary frame: a 3 MiB string of '<'.
	fc := dialRaw(t, c)
	f := append([]byte(FramePreamble), mustFrame(t, Event{Kind: KindFinding, TS: 1, Body: &Finding{Severity: SevInfo, Summary: strings.Repeat("<", 3<<20)}})...)
	if _, err := fc.Write(append(f, mustFrame(t, replayEvent(3))...)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "two refusals and two events", func() bool { st := c.Stats(); return st.Rejected == 2 && st.Events == 2 })
	st := c.Stats()
	if st.RejectedBy["too_large"] != 2 {
		t.Fatalf("rejected_by %v, want too_large 2", st.RejectedBy)
	}
	for _, cs := range st.Conns {
		if cs.RejectedBy["too_large"] != 1 || !strings.Contains(cs.LastError, "over the 16777216-byte limit") {
			t.Errorf("connection %d: rejected_by %v, last error %q", cs.ID, cs.RejectedBy, cs.LastError)
		}
	}
	for _, ev := range rec.events() {
		if ev.Kind != KindReplay {
			t.Errorf("published a %s event", ev.Kind)
		}
	}
}

// A connection that closes inside a JSON line or a frame loses that line
// or frame, and both are counted as truncated (WIRE.md).
func TestCollectorCountsCutLineAndFrameAsTruncated(t *testing.T) {
	c, _ := startCollector(t, ListenOptions{})
	good := jsonLine(t, replayEvent(1))
	jc := dialRaw(t, c)
	jc.Write(append(append([]byte{}, good...), good[:25]...))
	jc.Close()
	frame := mustFrame(t, replayEvent(2))
	fc := dialRaw(t, c)
	fc.Write(append(append([]byte(FramePreamble), frame...), frame[:9]...))
	fc.Close()
	testenv.WaitFor(t, "both connections closed", func() bool { st := c.Stats(); return st.Open == 0 && st.Connections == 2 })
	st := c.Stats()
	if st.Events != 2 || st.RejectedBy["truncated"] != 2 {
		t.Fatalf("events %d, rejected_by %v: want 2 events and truncated 2", st.Events, st.RejectedBy)
	}
	for _, cs := range st.Conns {
		if cs.RejectedBy["truncated"] != 1 {
			t.Errorf("%s connection: rejected_by %v, closed %q, last error %q", cs.Protocol, cs.RejectedBy, cs.Closed, cs.LastError)
		}
	}
}

// A frame header announcing 16 MiB reserves nothing: the buffer grows
// with the bytes that arrive.
func TestCollectorFrameHeaderReservesNothing(t *testing.T) {
	c, _ := startCollector(t, ListenOptions{})
	const conns = 8
	base := liveHeap()
	hdr := binary.LittleEndian.AppendUint32([]byte(FramePreamble), MaxFrameSize)
	hdr = append(hdr, make([]byte, 100)...)
	for range conns {
		nc := dialRaw(t, c)
		if _, err := nc.Write(hdr); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, "every header read", func() bool {
		st := c.Stats()
		return st.Open == conns && st.Bytes == conns*uint64(len(hdr))
	})
	if grew := liveHeap() - base; grew > conns<<20 {
		t.Fatalf("%d connections that sent a 16 MiB header and 100 bytes hold %d bytes of heap", conns, grew)
	}
	if st := c.Stats(); st.Buffered != conns*decodeBufSize {
		t.Fatalf("buffered %d, want %d first buffers", st.Buffered, conns*decodeBufSize)
	}
}

// The F6 load, scaled down: 60 connections each hold an unfinished 1 MiB
// JSON line against an 8 MiB budget. The buffers never hold more than the
// budget, the connections over it are closed and counted, and everything
// is given back when they close.
func TestCollectorBufferBudgetHolds(t *testing.T) {
	const (
		conns  = 60
		budget = 8 << 20
		part   = 1 << 20
	)
	line := []byte(`{"v":1,"kind":"finding","ts_ns":1,"body":{"severity":"info","summary":"` + strings.Repeat("x", part))
	base := liveHeap()
	c, _ := startCollector(t, ListenOptions{BufferBudget: budget, StallTimeout: -1})
	var wg sync.WaitGroup
	ncs := make([]net.Conn, conns)
	for i := range ncs {
		ncs[i] = dialRaw(t, c)
		wg.Add(1)
		go func(nc net.Conn) {
			defer wg.Done()
			nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			nc.Write(line) // fails once the collector closes this connection
		}(ncs[i])
	}
	wg.Wait()
	testenv.WaitFor(t, "every connection holding its line or closed over budget", func() bool {
		cs := connStats(c)
		if len(cs) != conns {
			return false
		}
		for _, s := range cs {
			if s.Open && s.Bytes != uint64(len(line)) {
				return false
			}
		}
		return true
	})
	st := c.Stats()
	held := liveHeap() - base
	t.Logf("open %d, closed over budget %d, buffered %d (peak %d), live heap +%d", st.Open, st.ClosedBy["over budget"], st.Buffered, st.BufferedPeak, held)
	if st.BufferedPeak > budget {
		t.Errorf("buffers held %d bytes at peak, over the %d-byte budget", st.BufferedPeak, budget)
	}
	if held > budget+4<<20 {
		t.Errorf("live heap grew by %d bytes under an %d-byte budget", held, budget)
	}
	// Closed mid-line (the line counted as rejected) or refused before
	// their first buffer: every one counted.
	if st.ClosedBy["over budget"] == 0 || st.RejectedBy["over_budget"]+st.RefusedBy["over_budget"] != st.ClosedBy["over budget"] || st.Open == 0 {
		t.Errorf("closed_by %v rejected_by %v refused_by %v open %d: want some connections closed over budget, counted, and the rest open", st.ClosedBy, st.RejectedBy, st.RefusedBy, st.Open)
	}
	for _, nc := range ncs {
		nc.Close()
	}
	testenv.WaitFor(t, "every connection closed", func() bool { return c.Stats().Open == 0 })
	if st := c.Stats(); st.Buffered != 0 {
		t.Errorf("%d bytes still accounted after every connection closed", st.Buffered)
	}
	if after := liveHeap() - base; after > 2<<20 {
		t.Errorf("live heap still %d bytes above the start after every connection closed", after)
	}
}

// A JSON line longer than the budget allows, on an idle collector, is
// refused with over_budget rather than growing past it.
func TestCollectorOneLineOverBudget(t *testing.T) {
	c, _ := startCollector(t, ListenOptions{BufferBudget: 1 << 20, StallTimeout: -1})
	nc := dialRaw(t, c)
	go nc.Write([]byte(`{"v":1,"kind":"finding","body":{"summary":"` + strings.Repeat("y", 2<<20)))
	testenv.WaitFor(t, "over budget", func() bool { return c.Stats().RejectedBy["over_budget"] == 1 })
	if err := readUntilClosed(nc); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the connection ended", func() bool { return c.Stats().Open == 0 })
	cs := c.Stats().Conns[0]
	if cs.Closed != "over budget" || !strings.Contains(cs.LastError, "1048576-byte memory budget") {
		t.Fatalf("closed %q, last error %q", cs.Closed, cs.LastError)
	}
}

// readUntilClosed reads nc until the collector closes it (or 30 s pass: a
// hang guard).
func readUntilClosed(nc net.Conn) error {
	nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, nc)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errors.New("collector did not close the connection")
	}
	return nil
}

func TestCollectorIdleAndStallDeadlines(t *testing.T) {
	// Each deadline on its own collector, the other one far away, so a slow
	// write on a loaded box cannot turn a stall into an idle close.
	far := 30 * time.Second
	c, _ := startCollector(t, ListenOptions{IdleTimeout: 100 * time.Millisecond, StallTimeout: far})
	idle := dialRaw(t, c)
	between := dialRaw(t, c) // one event, then nothing
	between.Write(jsonLine(t, replayEvent(1)))
	s, _ := startCollector(t, ListenOptions{IdleTimeout: far, StallTimeout: 100 * time.Millisecond})
	stalledLine := dialRaw(t, s)
	stalledLine.Write([]byte(`{"v":1,"kind":"rep`))
	stalledFrame := dialRaw(t, s)
	stalledFrame.Write(append([]byte(FramePreamble), mustFrame(t, replayEvent(1))[:7]...))
	for _, nc := range []net.Conn{idle, between, stalledLine, stalledFrame} {
		if err := readUntilClosed(nc); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, "two closed each", func() bool {
		return c.Stats().Open == 0 && len(c.Stats().Conns) == 2 && s.Stats().Open == 0 && len(s.Stats().Conns) == 2
	})
	if st := c.Stats(); st.ClosedBy["idle timeout"] != 2 || st.Events != 1 {
		t.Fatalf("idle collector: closed_by %v events %d: want 2 idle, 1 event", st.ClosedBy, st.Events)
	}
	if st := s.Stats(); st.ClosedBy["stalled"] != 2 || st.RejectedBy["stalled"] != 2 {
		t.Fatalf("stall collector: closed_by %v rejected_by %v: want 2 stalled (counted)", st.ClosedBy, st.RejectedBy)
	}
}

// A flood of idle connections over the cap is refused at once and
// counted; producers already connected keep being served, and once the
// idle ones time out a new producer gets in.
func TestCollectorConnectionCap(t *testing.T) {
	const (
		maxConns = 8
		flood    = 300
	)
	// The idle timeout outlasts the flood on a loaded box (the producer
	// must still be connected for its second event), and is short enough
	// for the idle ones to go.
	c, rec := startCollector(t, ListenOptions{MaxConns: maxConns, IdleTimeout: 2 * time.Second})
	producer := dialRaw(t, c)
	producer.Write(jsonLine(t, replayEvent(1)))
	testenv.WaitFor(t, "first event", func() bool { return len(rec.events()) == 1 })
	ep, _ := parseAddr(c.Addr())
	var floods []net.Conn
	for range flood {
		nc, err := net.Dial(ep.network, ep.address)
		if err != nil {
			t.Fatal(err)
		}
		floods = append(floods, nc)
	}
	defer func() {
		for _, nc := range floods {
			nc.Close()
		}
	}()
	testenv.WaitFor(t, "the flood refused", func() bool { st := c.Stats(); return st.Refused+uint64(st.Open) >= flood+1 })
	st := c.Stats()
	if st.Open > maxConns || st.RefusedBy["conn_limit"] < flood+1-maxConns {
		t.Fatalf("open %d, refused_by %v: want at most %d open and the rest refused", st.Open, st.RefusedBy, maxConns)
	}
	// Refused connections are closed by the collector, not left hanging.
	for _, nc := range floods[len(floods)-10:] {
		if err := readUntilClosed(nc); err != nil {
			t.Fatal(err)
		}
	}
	// The connected producer is still served.
	producer.Write(jsonLine(t, replayEvent(2)))
	testenv.WaitFor(t, "second event", func() bool { return len(rec.events()) == 2 })
	// Once the idle connections time out, a new producer is accepted.
	testenv.WaitFor(t, "idle connections closed", func() bool { return c.Stats().ClosedBy["idle timeout"] >= maxConns-1 })
	late := dialRaw(t, c)
	late.Write(jsonLine(t, replayEvent(3)))
	testenv.WaitFor(t, "the late producer's event", func() bool { return len(rec.events()) == 3 })
}

func TestUnixPathOverSunPathRefused(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("s", 120)+".sock")
	_, err := Listen("unix://"+long, ListenOptions{})
	if !errors.Is(err, ErrBadAddress) || !strings.Contains(err.Error(), long) || !strings.Contains(err.Error(), "107") {
		t.Fatalf("Listen: %v", err)
	}
	_, err = Dial("unix://"+long, DialOptions{})
	if !errors.Is(err, ErrBadAddress) || !strings.Contains(err.Error(), "107") {
		t.Fatalf("Dial: %v", err)
	}
}

func TestEmitterRefusesWhatTheCollectorWouldRefuse(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{})
	em, err := Dial(c.Addr(), DialOptions{QueueBytes: 32 << 20, FlushTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	em.Emit(Event{Kind: KindFinding, TS: 1, Body: &Finding{Severity: SevInfo, Summary: strings.Repeat("<", 3<<20)}})
	em.Emit(replayEvent(1))
	em.Close()
	testenv.WaitFor(t, "the replay", func() bool { return len(rec.events()) == 1 })
	if st := em.Stats(); st.Invalid != 1 || !strings.Contains(em.LastError(), "16777216-byte limit") {
		t.Fatalf("emitter stats %+v, last error %q", st, em.LastError())
	}
	if st := c.Stats(); st.Rejected != 0 {
		t.Fatalf("collector rejected %d: the emitter sent what it refuses", st.Rejected)
	}
}

// After a large frame or line a connection gives its buffer back: it does
// not keep a 4 MiB slab for the rest of its life.
func TestCollectorShrinksAfterLargeInput(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{})
	big := Event{Kind: KindFinding, TS: 1, Body: &Finding{Severity: SevInfo, Summary: strings.Repeat("x", 4<<20)}}
	fc := dialRaw(t, c)
	fc.Write(append(append([]byte(FramePreamble), mustFrame(t, big)...), mustFrame(t, replayEvent(1))...))
	jc := dialRaw(t, c)
	jc.Write(append(jsonLine(t, big), jsonLine(t, replayEvent(2))...))
	testenv.WaitFor(t, "four events", func() bool { return len(rec.events()) == 4 })
	testenv.WaitFor(t, "buffers back to their first size", func() bool { return c.Stats().Buffered == 2*decodeBufSize })
	if st := c.Stats(); st.BufferedPeak < 8<<20 {
		t.Fatalf("peak %d: the large inputs never grew the buffers", st.BufferedPeak)
	}
}

// An emitter the collector turns away at its connection cap (accepted, then
// closed at once) counts nothing as sent or connected and says why.
func TestEmitterRefusedAtTheConnectionCapCountsNothingSent(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{MaxConns: 1})
	holder := dialRaw(t, c)
	holder.Write(jsonLine(t, replayEvent(1)))
	testenv.WaitFor(t, "the holder's event", func() bool { return len(rec.events()) == 1 })
	// ConfirmWait is generous: the refusal arrives at once, and only a
	// failure of this test would wait it out.
	em, err := Dial(c.Addr(), DialOptions{ConfirmWait: 10 * time.Second, MinBackoff: time.Hour, MaxBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		em.Emit(replayEvent(uint64(i + 2)))
	}
	em.Close()
	if st := em.Stats(); st.Sent != 0 || st.Dropped != 5 || st.Connects != 0 {
		t.Errorf("refused emitter: %+v; want sent 0, dropped 5, connects 0", st)
	}
	if le := em.LastError(); !strings.Contains(le, "closed the connection") {
		t.Errorf("LastError %q does not say the collector closed the connection", le)
	}
	if got := c.Stats().RefusedBy["conn_limit"]; got == 0 || got > 3 {
		t.Errorf("conn_limit refusals %d; want 1 to 3 (one-hour backoff)", got)
	}
}
