package hook

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/testenv"
)

// recorder is a Publisher that keeps events and fails the test if Publish is
// ever called concurrently (the collector promises to serialise).
type recorder struct {
	t      testing.TB
	inside atomic.Int32
	mu     sync.Mutex
	evs    []Event
}

func (r *recorder) Publish(ev Event) {
	if r.inside.Add(1) != 1 {
		r.t.Error("Publish called concurrently")
	}
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
	r.inside.Add(-1)
}

func (r *recorder) events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.evs...)
}

// startCollector listens on a fresh Unix socket and serves into a recorder.
func startCollector(t *testing.T, opts ListenOptions) (*Collector, *recorder) {
	t.Helper()
	return startCollectorAt(t, "unix://"+filepath.Join(t.TempDir(), "c.sock"), opts)
}

func startCollectorAt(t *testing.T, addr string, opts ListenOptions) (*Collector, *recorder) {
	t.Helper()
	c, err := Listen(addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{t: t}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx, rec) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return c, rec
}

func dialRaw(t *testing.T, c *Collector) net.Conn {
	t.Helper()
	ep, _ := parseAddr(c.Addr())
	nc, err := net.Dial(ep.network, ep.address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

func jsonLine(t testing.TB, ev Event) []byte {
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestCollectorTwoConcurrentProducers(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{Run: "run-42", Node: "testnode"})
	const nGo, nJSON = 20000, 5000
	var wg sync.WaitGroup
	wg.Add(2)
	var est EmitterStats
	go func() { // Go emitter, binary frames
		defer wg.Done()
		em, err := Dial(c.Addr(), DialOptions{QueueBytes: 64 << 20, FlushTimeout: time.Minute})
		if err != nil {
			t.Error(err)
			return
		}
		for i := range nGo {
			em.Emit(Event{Kind: KindReplay, TS: int64(i + 1), Body: &Replay{Step: uint64(i), BatchSize: 4, Mode: "graph"}})
		}
		em.Close()
		est = em.Stats()
	}()
	go func() { // JSON-lines writer
		defer wg.Done()
		nc := dialRaw(t, c)
		var buf []byte
		for i := range nJSON {
			buf = append(buf, jsonLine(t, Event{Kind: KindSched, TS: int64(i + 1), Src: Source{Proc: "py"},
				Body: &Sched{RunningReq: i, TokenUsage: 0.5}})...)
			if len(buf) > 32<<10 {
				nc.Write(buf)
				buf = buf[:0]
			}
		}
		nc.Write(buf)
		nc.Close()
	}()
	wg.Wait()
	// Both producers closed; the collector sees each EOF after the last event.
	testenv.WaitFor(t, "all events and both EOFs", func() bool {
		st := c.Stats()
		if st.Events != nGo+nJSON || len(st.Conns) != 2 {
			return false
		}
		for _, cs := range st.Conns {
			if cs.Open {
				return false
			}
		}
		return true
	})
	if est.Sent != nGo || est.Dropped != 0 || est.Invalid != 0 || est.Connects != 1 {
		t.Errorf("emitter stats %+v, want %d sent and nothing dropped", est, nGo)
	}
	st := c.Stats()
	if st.Rejected != 0 || st.ByKind["replay"] != nGo || st.ByKind["sched"] != nJSON || st.Connections != 2 {
		t.Errorf("collector stats %+v", st)
	}
	// Each producer's events arrive in order, with src and run filled in.
	var lastReplay, lastSched int64
	for _, ev := range rec.events() {
		if ev.Run != "run-42" || ev.Src.Node != "testnode" || ev.Src.PID != int32(os.Getpid()) {
			t.Fatalf("envelope not filled from the connection: %+v", ev)
		}
		switch ev.Kind {
		case KindReplay:
			if ev.TS != lastReplay+1 {
				t.Fatalf("replay out of order: %d after %d", ev.TS, lastReplay)
			}
			lastReplay = ev.TS
		case KindSched:
			if ev.TS != lastSched+1 || ev.Src.Proc != "py" || ev.Body.(*Sched).RunningReq != int(ev.TS-1) {
				t.Fatalf("sched event wrong: %+v", ev)
			}
			lastSched = ev.TS
		}
	}
	var frames, jsonl int
	for _, cs := range st.Conns {
		switch cs.Protocol {
		case "frames":
			frames++
			if cs.Events != nGo || cs.Closed != "eof" {
				t.Errorf("frames conn %+v", cs)
			}
		case "jsonl":
			jsonl++
			if cs.Events != nJSON || cs.Closed != "eof" {
				t.Errorf("jsonl conn %+v", cs)
			}
		}
	}
	if frames != 1 || jsonl != 1 {
		t.Errorf("conns %+v", st.Conns)
	}
}

// TestCollectorBadInput sends each bad input of the issue on its own
// connection while a good producer keeps sending, and checks every rejection
// is counted, framing-intact connections keep being read, and the good
// producer loses nothing.
func TestCollectorBadInput(t *testing.T) {
	c, _ := startCollector(t, ListenOptions{})
	good := mustFrame(t, replayEvent(1))
	goodLine := jsonLine(t, replayEvent(2))
	unknownKind := append([]byte{}, good...)
	unknownKind[5] = 77
	badUTF8 := mustFrame(t, Event{Kind: KindSession, Body: &Session{ID: "abc", Outcome: OutcomeDone}})
	badUTF8[len(badUTF8)-3-5-2] = 0xff // inside "abc"? verified below
	if _, _, err := DecodeFrame(badUTF8); ReasonOf(err) != ReasonBadUTF8 {
		t.Fatalf("test frame: %v", err)
	}
	type tc struct {
		name     string
		stream   [][]byte
		events   uint64 // good events expected from this connection
		reasons  map[Reason]uint64
		lost     bool
		jsonMode bool
	}
	pre := []byte(FramePreamble)
	cases := []tc{
		{"unknown kind", [][]byte{pre, good, unknownKind, good}, 2, map[Reason]uint64{ReasonUnknownKind: 1}, false, false},
		{"bad utf8 frame", [][]byte{pre, good, badUTF8, good}, 2, map[Reason]uint64{ReasonBadUTF8: 1}, false, false},
		{"wrong length", [][]byte{pre, good, {3, 0, 0, 0, 1, 4, 0}, good}, 1, map[Reason]uint64{ReasonBadLength: 1}, true, false},
		{"1 GB prefix", [][]byte{pre, good, binary.LittleEndian.AppendUint32(nil, 1<<30), good}, 1, map[Reason]uint64{ReasonBadLength: 1}, true, false},
		{"bad preamble", [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n")}, 0, map[Reason]uint64{ReasonBadPreamble: 1}, true, false},
		{"truncated json", [][]byte{goodLine, []byte(`{"v":1,"kind":"replay","ts_ns":1,"body":{"st` + "\n"), goodLine}, 2, map[Reason]uint64{ReasonBadJSON: 1}, false, true},
		{"nan json", [][]byte{goodLine, []byte(`{"v":1,"kind":"sched","ts_ns":1,"body":{"token_usage":NaN}}` + "\n"), goodLine}, 2, map[Reason]uint64{ReasonNonFinite: 1}, false, true},
		{"inf json", [][]byte{goodLine, []byte(`{"v":1,"kind":"sched","ts_ns":1,"body":{"token_usage":Infinity}}` + "\n"), goodLine}, 2, map[Reason]uint64{ReasonNonFinite: 1}, false, true},
		{"bad utf8 json", [][]byte{goodLine, []byte("{\"v\":1,\"kind\":\"session\",\"ts_ns\":1,\"body\":{\"id\":\"\xc0\xaf\"}}\n"), goodLine}, 2, map[Reason]uint64{ReasonBadUTF8: 1}, false, true},
		{"unknown kind json", [][]byte{goodLine, []byte(`{"v":1,"kind":"nope","ts_ns":1,"body":{}}` + "\n"), goodLine}, 2, map[Reason]uint64{ReasonUnknownKind: 1}, false, true},
		{"cut at close", [][]byte{pre, good, good[:9]}, 1, map[Reason]uint64{ReasonTruncated: 1}, true, false},
	}
	// A good producer runs throughout.
	em, err := Dial(c.Addr(), DialOptions{QueueBytes: 64 << 20, FlushTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const nGood = 3000
	stopGood := make(chan struct{})
	goodDone := make(chan struct{})
	go func() {
		defer close(goodDone)
		for i := range nGood {
			em.Emit(replayEvent(uint64(i)))
			if i%100 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		<-stopGood
		em.Close()
	}()
	var wantEvents uint64 = nGood
	wantReasons := map[string]uint64{}
	var wantLost uint64
	for _, tc := range cases {
		nc := dialRaw(t, c)
		for _, b := range tc.stream {
			nc.Write(b)
		}
		nc.(interface{ CloseWrite() error }).CloseWrite()
		wantEvents += tc.events
		for r, n := range tc.reasons {
			wantReasons[r.String()] += n
		}
		if tc.lost {
			wantLost++
		}
	}
	close(stopGood)
	<-goodDone
	if em.Stats().Dropped != 0 {
		t.Fatalf("good producer dropped: %+v", em.Stats())
	}
	testenv.WaitFor(t, "every connection to finish", func() bool {
		st := c.Stats()
		return st.Open == 0 && st.Connections == uint64(len(cases)+1)
	})
	st := c.Stats()
	if st.Events != wantEvents {
		t.Errorf("events %d, want %d", st.Events, wantEvents)
	}
	if fmt.Sprint(st.RejectedBy) != fmt.Sprint(wantReasons) {
		t.Errorf("rejected by %v, want %v", st.RejectedBy, wantReasons)
	}
	if st.LostFraming != wantLost {
		t.Errorf("lost framing %d, want %d", st.LostFraming, wantLost)
	}
	for _, cs := range st.Conns {
		if cs.Rejected > 0 && !strings.Contains(cs.LastError, "byte ") {
			t.Errorf("conn %d: last error %q does not name a position", cs.ID, cs.LastError)
		}
	}
}

func TestEmitterDropsWhenCollectorGone(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{})
	em, err := Dial(c.Addr(), DialOptions{QueueBytes: 4 << 10, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, FlushTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		em.Emit(replayEvent(uint64(i)))
	}
	testenv.WaitFor(t, "first events", func() bool { return len(rec.events()) == 10 })
	c.Close()
	testenv.WaitFor(t, "collector to close", func() bool { return c.Stats().Open == 0 })
	const more = 5000
	for i := range more {
		em.Emit(replayEvent(uint64(i)))
	}
	em.Close()
	st := em.Stats()
	if st.Sent != 10 || st.Dropped != more || st.Sent+st.Dropped != 10+more {
		t.Fatalf("emitter stats %+v, want 10 sent and %d dropped", st, more)
	}
	if em.LastError() == "" {
		t.Error("no last error recorded")
	}
	em.Emit(replayEvent(1))
	if em.Dropped() != more+1 {
		t.Errorf("Emit after Close: dropped %d", em.Dropped())
	}
}

func TestEmitterWithoutCollectorNeverConnects(t *testing.T) {
	addr := "unix://" + filepath.Join(t.TempDir(), "absent.sock")
	em, err := Dial(addr, DialOptions{QueueBytes: 1 << 10, FlushTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		em.Emit(replayEvent(uint64(i)))
	}
	em.Close()
	if st := em.Stats(); st.Dropped != 1000 || st.Sent != 0 || st.Connects != 0 {
		t.Fatalf("stats %+v", st)
	}
	if !strings.Contains(em.LastError(), "connect unix://") {
		t.Errorf("last error %q", em.LastError())
	}
}

func TestEmitterReconnects(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "c.sock")
	c1, rec1 := startCollectorAt(t, "unix://"+sock, ListenOptions{})
	em, err := Dial(c1.Addr(), DialOptions{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	em.Emit(replayEvent(1))
	testenv.WaitFor(t, "event on first collector", func() bool { return len(rec1.events()) == 1 })
	c1.Close()
	c2, rec2 := startCollectorAt(t, "unix://"+sock, ListenOptions{})
	_ = c2
	// Keep emitting until the emitter has found the new collector.
	testenv.WaitFor(t, "event on second collector", func() bool {
		em.Emit(replayEvent(2))
		time.Sleep(time.Millisecond)
		return len(rec2.events()) > 0
	})
	if em.Stats().Connects < 2 {
		t.Errorf("connects %d, want >= 2", em.Stats().Connects)
	}
}

func TestEmitterRejectsInvalidEvents(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{})
	em, err := Dial(c.Addr(), DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	em.Emit(Event{Kind: KindSched, Body: &Sched{TokenUsage: 1}})
	em.Emit(Event{Kind: KindReplay}) // no body
	em.Emit(Event{Kind: KindSched, Body: &Sched{TokenUsage: 2}})
	em.Close()
	testenv.WaitFor(t, "events", func() bool { return len(rec.events()) == 2 })
	if st := em.Stats(); st.Invalid != 1 || st.Sent != 2 {
		t.Fatalf("stats %+v", st)
	}
	if u := rec.events()[1].Body.(*Sched).TokenUsage; u != 2 {
		t.Fatalf("second event token usage %v: the invalid event corrupted the queue", u)
	}
}

func TestUnixSocketIs0600AndReplacesStale(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "c.sock")
	// A stale socket file: bound once, listener gone.
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	c, err := Listen("unix://"+sock, ListenOptions{})
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want socket 0600", fi.Mode())
	}
	// A live collector is not replaced.
	if _, err := Listen("unix://"+sock, ListenOptions{}); err == nil || !strings.Contains(err.Error(), "in use by a running collector") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
	c.Close()
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file left after Close: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("files left in the socket directory: %v", entries)
	}
	// A regular file is never removed.
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("x"), 0o644)
	if _, err := Listen("unix://"+plain, ListenOptions{}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "x" {
		t.Fatal("regular file was touched")
	}
}

func TestListenRefusesRemoteTCP(t *testing.T) {
	for _, addr := range []string{"tcp://0.0.0.0:0", "tcp://:0", "tcp://[::]:0"} {
		_, err := Listen(addr, ListenOptions{})
		if !errors.Is(err, ErrRemoteRefused) || !strings.Contains(err.Error(), "--allow-remote") {
			t.Errorf("%s: err = %v, want a refusal naming --allow-remote", addr, err)
		}
	}
	c, err := Listen("tcp://0.0.0.0:0", ListenOptions{AllowRemote: true})
	if err != nil {
		t.Fatalf("with AllowRemote: %v", err)
	}
	c.Close()
	for _, addr := range []string{"tcp://127.0.0.1:0", "tcp://localhost:0"} {
		c, err := Listen(addr, ListenOptions{})
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if !strings.HasPrefix(c.Addr(), "tcp://127.0.0.1:") && !strings.HasPrefix(c.Addr(), "tcp://[::1]:") || strings.HasSuffix(c.Addr(), ":0") {
			t.Errorf("Addr() = %s", c.Addr())
		}
		c.Close()
	}
	for _, addr := range []string{"http://x", "unix://", "tcp://nohostport", "/tmp/x.sock"} {
		if _, err := Listen(addr, ListenOptions{}); !errors.Is(err, ErrBadAddress) || !strings.Contains(err.Error(), "want") {
			t.Errorf("%s: err = %v, want ErrBadAddress saying what is wanted", addr, err)
		}
		if _, err := Dial(addr, DialOptions{}); !errors.Is(err, ErrBadAddress) {
			t.Errorf("Dial %s: err = %v, want ErrBadAddress", addr, err)
		}
	}
}

// A connection that ends inside the preamble is reported with the bytes it
// sent, not padded with NULs.
func TestCollectorShortPreambleQuotesOnlyWhatArrived(t *testing.T) {
	c, _ := startCollectorAt(t, "tcp://127.0.0.1:0", ListenOptions{Run: "r"})
	nc := dialRaw(t, c)
	nc.Write([]byte("xy"))
	nc.(interface{ CloseWrite() error }).CloseWrite()
	testenv.WaitFor(t, "the connection to end", func() bool {
		st := c.Stats()
		return st.Connections == 1 && st.Open == 0
	})
	st := c.Stats()
	if len(st.Conns) != 1 || st.RejectedBy[ReasonBadPreamble.String()] != 1 {
		t.Fatalf("stats %+v, want one connection rejected for its preamble", st)
	}
	if e := st.Conns[0].LastError; !strings.Contains(e, `starts with "xy":`) {
		t.Fatalf("last error %q, want it to quote exactly the 2 bytes sent", e)
	}
}

func TestCollectorTCPFillsNodeFromRemote(t *testing.T) {
	c, rec := startCollectorAt(t, "tcp://127.0.0.1:0", ListenOptions{Run: "r"})
	nc := dialRaw(t, c)
	nc.Write(jsonLine(t, replayEvent(1)))
	nc.Write(jsonLine(t, Event{Kind: KindReplay, Src: Source{Node: "mine", PID: 9}, Run: "own", Body: &Replay{Mode: ModeEager}}))
	testenv.WaitFor(t, "events", func() bool { return len(rec.events()) == 2 })
	evs := rec.events()
	if evs[0].Src.Node != "127.0.0.1" || evs[0].Run != "r" || evs[0].Src.PID != 0 {
		t.Errorf("filled envelope %+v", evs[0])
	}
	if evs[1].TS < time.Now().Add(-time.Minute).UnixNano() {
		t.Errorf("event without ts_ns not stamped with its arrival: %d", evs[1].TS)
	}
	if evs[0].TS != 1 {
		t.Errorf("producer's ts_ns overwritten: %d", evs[0].TS)
	}
	if evs[1].Src.Node != "mine" || evs[1].Src.PID != 9 || evs[1].Run != "own" {
		t.Errorf("producer's own envelope overwritten: %+v", evs[1])
	}
}

func TestCollectorManyProducersPublishSerially(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{})
	const producers, each = 6, 2000
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := dialRaw(t, c)
			buf := []byte(FramePreamble)
			for i := range each {
				buf, _ = AppendFrame(buf, Event{Kind: KindReplay, TS: int64(p + 1), Body: &Replay{Step: uint64(i), Mode: ModeGraph}})
			}
			nc.Write(buf)
			nc.Close()
		}()
	}
	wg.Wait()
	testenv.WaitFor(t, "all events", func() bool { return c.Stats().Events == producers*each })
	perProducer := map[int64]int{}
	for _, ev := range rec.events() {
		perProducer[ev.TS]++
	}
	for p := range producers {
		if perProducer[int64(p+1)] != each {
			t.Errorf("producer %d: %d events", p, perProducer[int64(p+1)])
		}
	}
}

// TestPythonExampleFromWIRE runs the Python emitter printed in WIRE.md
// against a collector, so the documented example keeps working.
func TestPythonExampleFromWIRE(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	doc, err := os.ReadFile("WIRE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- python-example")
	if !ok {
		t.Fatal("WIRE.md lacks the python-example marker")
	}
	_, after, _ = strings.Cut(after, "```python\n")
	script, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatal("unterminated python block in WIRE.md")
	}
	if n := strings.Count(strings.TrimSpace(script), "\n") + 1; n > 12 {
		t.Errorf("the example is %d lines; the issue promises about ten", n)
	}
	c, rec := startCollector(t, ListenOptions{Run: "py"})
	path := filepath.Join(t.TempDir(), "emit.py")
	os.WriteFile(path, []byte(script), 0o644)
	out, err := exec.Command(py, path, strings.TrimPrefix(c.Addr(), "unix://")).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	testenv.WaitFor(t, "100 events", func() bool { return len(rec.events()) == 100 })
	for i, ev := range rec.events() {
		r, ok := ev.Body.(*Replay)
		if !ok || r.Step != uint64(i) || ev.Src.Proc != "py-demo" || ev.Src.PID == 0 || ev.Run != "py" || ev.TS == 0 {
			t.Fatalf("event %d: %+v %+v", i, ev, ev.Body)
		}
	}
	if st := c.Stats(); st.Rejected != 0 {
		t.Fatalf("rejected %+v", st)
	}
}

func TestCollectorCloseDrainsInFlight(t *testing.T) {
	c, err := Listen("unix://"+filepath.Join(t.TempDir(), "c.sock"), ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{t: t}
	served := make(chan error, 1)
	go func() { served <- c.Serve(context.Background(), rec) }()
	nc := dialRaw(t, c)
	testenv.WaitFor(t, "connection", func() bool { return c.Stats().Open == 1 })
	buf := []byte(FramePreamble)
	for i := range 2000 {
		buf, _ = AppendFrame(buf, replayEvent(uint64(i)))
	}
	if _, err := nc.Write(buf); err != nil { // in the collector's socket buffer now
		t.Fatal(err)
	}
	c.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if n := len(rec.events()); n != 2000 {
		t.Fatalf("%d of 2000 events sent before Close were published", n)
	}
	if st := c.Stats(); st.Rejected != 0 || st.Conns[0].Closed != "shutdown" {
		t.Fatalf("stats %+v", st)
	}
}

// A connection that never sent a byte and is ended by Close is reported as
// ended by shutdown, not as if the producer hung up.
func TestCollectorCloseIdleConnectionIsShutdown(t *testing.T) {
	c, err := Listen("unix://"+filepath.Join(t.TempDir(), "c.sock"), ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- c.Serve(context.Background(), &recorder{t: t}) }()
	dialRaw(t, c)
	testenv.WaitFor(t, "connection", func() bool { return c.Stats().Open == 1 })
	c.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); len(st.Conns) != 1 || st.Conns[0].Closed != "shutdown" {
		t.Fatalf("stats %+v, want the idle connection closed by shutdown", st)
	}
}

// TestEmitterSlowCollector: a peer that accepts but never reads. Emit must
// keep returning, drop what does not fit, and Close must give up after its
// flush timeout with every event accounted for.
func TestEmitterSlowCollector(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "slow.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never read
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	em, err := Dial("unix://"+sock, DialOptions{QueueBytes: 256 << 10, FlushTimeout: 300 * time.Millisecond, WriteTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200000 // ~5 MB of frames: far more than socket buffer plus queue
	for i := range n {
		em.Emit(replayEvent(uint64(i)))
	}
	start := time.Now()
	em.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with a 300ms flush timeout", d)
	}
	st := em.Stats()
	if st.Sent+st.Dropped != n || st.Dropped == 0 || st.Sent == 0 {
		t.Fatalf("stats %+v: want sent+dropped = %d with some of each", st, n)
	}
}

func TestUnixSocketLongPath(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < 100 {
		dir = filepath.Join(dir, strings.Repeat("d", min(20, 100-len(dir)-1)))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "c.sock") // 107 bytes: fits, its private temporary name would not
	if len(sock) != 107 {
		t.Fatalf("path length %d", len(sock))
	}
	c, rec := startCollectorAt(t, "unix://"+sock, ListenOptions{})
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v %v", fi, err)
	}
	em, err := Dial(c.Addr(), DialOptions{FlushTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	em.Emit(replayEvent(1))
	em.Close()
	testenv.WaitFor(t, "event", func() bool { return len(rec.events()) == 1 })
}

// A negative ts_ns and one far past the collector's clock are refused as
// bad_value (a paced replay of a bundle holding them would wait for years);
// small positive and current timestamps are kept, and so is the connection.
func TestCollectorRejectsImpossibleTimestamps(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{})
	nc := dialRaw(t, c)
	good := jsonLine(t, replayEvent(1)) // ts_ns 1: the twin's and tests' clock
	now := jsonLine(t, Event{Kind: KindReplay, TS: time.Now().UnixNano(), Body: replayEvent(2).Body})
	withTS := func(ts string) []byte {
		b := bytes.Replace(jsonLine(t, replayEvent(3)), []byte(`"ts_ns":3,`), []byte(`"ts_ns":`+ts+`,`), 1)
		if !bytes.Contains(b, []byte(ts)) {
			t.Fatalf("no ts_ns in %s", b)
		}
		return b
	}
	for _, b := range [][]byte{withTS("-5"), withTS("9223372036854775807"), good, now} {
		nc.Write(b)
	}
	nc.(interface{ CloseWrite() error }).CloseWrite()
	testenv.WaitFor(t, "the connection to finish", func() bool {
		st := c.Stats()
		return st.Open == 0 && st.Connections == 1
	})
	st := c.Stats()
	if st.Events != 2 || st.Rejected != 2 || st.RejectedBy[ReasonBadValue.String()] != 2 {
		t.Fatalf("events %d rejected %d by %v, want 2 events and 2 bad_value", st.Events, st.Rejected, st.RejectedBy)
	}
	if cs := st.Conns[0]; cs.Closed != "eof" || !strings.Contains(cs.LastError, "ahead of the collector's clock") {
		t.Errorf("conn closed %q, last error %q", cs.Closed, cs.LastError)
	}
	for _, ev := range rec.events() {
		if ev.TS < 0 || ev.TS == math.MaxInt64 {
			t.Errorf("recorded ts_ns %d", ev.TS)
		}
	}
}
