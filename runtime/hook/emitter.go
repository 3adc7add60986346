package hook

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DialOptions configure an Emitter. Zero values pick the defaults.
type DialOptions struct {
	// QueueBytes bounds the encoded frames waiting to be written (default
	// 4 MiB). Emit drops an event when the queue is full.
	QueueBytes int
	// Source and Run are written into events that leave them empty. Leave
	// them unset to let the collector fill them from the connection.
	Source Source
	Run    string
	// FlushTimeout bounds how long Close waits to write what is queued
	// (default 2s).
	FlushTimeout time.Duration
	// WriteTimeout is how long one write may block before the collector is
	// considered stuck and the connection is dropped and redialled
	// (default 5s).
	WriteTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between connection attempts
	// (defaults 50ms and 2s; the wait doubles after each failure).
	MinBackoff, MaxBackoff time.Duration
	// ConfirmWait is how long a new connection waits for the collector to
	// refuse it before the emitter writes to it (defaults: 250ms with TLS,
	// 10ms otherwise). In TLS 1.3 the client's handshake completes before
	// the collector checks the client certificate, so a refused certificate
	// shows only as an alert arriving after the handshake; a collector over
	// its connection limit closes the socket right after accepting it. The
	// collector never writes, so anything readable in this window (an
	// alert, EOF, bytes) means it refused the connection: nothing is
	// counted sent or connected, and the emitter backs off.
	ConfirmWait time.Duration
	// TLS makes a tcp:// connection TLS with a client certificate
	// (ClientTLSConfig), for a collector that requires it. When nil, Dial
	// reads KVCANARY_TLS_CERT, KVCANARY_TLS_KEY and KVCANARY_TLS_CA
	// (ClientTLSFromEnv) for a tcp:// address; set none of them for a plain
	// connection.
	TLS *tls.Config
}

// EmitterStats are an emitter's counters.
type EmitterStats struct {
	Sent     uint64 `json:"sent"`     // frames written completely to a collector
	Dropped  uint64 `json:"dropped"`  // events lost: queue full, no collector, failed write, Emit after Close
	Invalid  uint64 `json:"invalid"`  // events AppendFrame refused (bad kind or body, a value Event.Validate refuses, NaN, invalid UTF-8)
	Connects uint64 `json:"connects"` // connections the collector accepted (the first included; see DialOptions.ConfirmWait)
}

// Emitter sends events to a collector as binary frames from a background
// goroutine. Emit never blocks on the network: when the collector is slow or
// gone the queue fills and further events are dropped and counted.
type Emitter struct {
	ep   endpoint
	opts DialOptions

	mu      sync.Mutex
	buf     []byte // encoded frames waiting
	pending uint64 // events in buf
	closed  bool

	wake    chan struct{}
	stop    chan struct{} // Close was called: flush, then exit
	abandon chan struct{} // the flush timed out: drop the rest, exit now
	done    chan struct{}

	connMu sync.Mutex
	conn   net.Conn // owned by the writer goroutine; Close may close it to unblock a write

	sent, dropped, invalid, connects atomic.Uint64
	lastErr                          atomic.Value // string
}

// Dial returns an emitter for addr (unix:///path.sock or tcp://HOST:PORT).
// It tries to connect once before returning (waiting ConfirmWait for the
// collector's verdict on the connection); if the collector is not there
// yet the emitter keeps retrying in the background, so an error means only a
// malformed address.
func Dial(addr string, opts DialOptions) (*Emitter, error) {
	ep, err := parseAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = 4 << 20
	}
	if opts.FlushTimeout <= 0 {
		opts.FlushTimeout = 2 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 5 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 50 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(2*time.Second, opts.MinBackoff)
	}
	if opts.TLS == nil && ep.network == "tcp" {
		if opts.TLS, err = ClientTLSFromEnv(); err != nil {
			return nil, fmt.Errorf("dial %s: %w", ep, err)
		}
	}
	if opts.ConfirmWait <= 0 {
		opts.ConfirmWait = 10 * time.Millisecond
		if opts.TLS != nil && ep.network == "tcp" {
			opts.ConfirmWait = 250 * time.Millisecond
		}
	}
	e := &Emitter{ep: ep, opts: opts,
		buf:  make([]byte, 0, min(opts.QueueBytes, 1<<20)),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), abandon: make(chan struct{}), done: make(chan struct{})}
	e.connect(time.Second)
	go e.run()
	return e, nil
}

// Emit queues ev. It never waits for the network; it drops ev (and counts
// it) when the queue is full or the emitter is closed. The body is encoded
// before Emit returns, so the caller may reuse it. A run.end without Sent
// gets the emitter's count (WIRE.md, "run.end's sent").
func (e *Emitter) Emit(ev Event) {
	if ev.Src == (Source{}) {
		ev.Src = e.opts.Source
	}
	if ev.Run == "" {
		ev.Run = e.opts.Run
	}
	e.mu.Lock()
	if e.closed || len(e.buf) >= e.opts.QueueBytes {
		e.mu.Unlock()
		e.dropped.Add(1)
		return
	}
	if re, ok := ev.Body.(*RunEnd); ok && re != nil && re.Sent == 0 {
		// run.end carries sent (WIRE.md): the frames written so far and
		// those queued ahead of it. A copy: the caller's body is its own.
		c := *re
		c.Sent = e.sent.Load() + e.pending
		ev.Body = &c
	}
	wasEmpty := len(e.buf) == 0
	start := len(e.buf)
	b, err := AppendFrame(e.buf, ev)
	if err == nil {
		// The collector's size rule (a bundle line of at most
		// MaxEventLine bytes), so Emit never sends what it would refuse.
		if err = AdmitEvent(ev, len(b)-start-frameHeaderLen, b[start+6]&FlagJSON != 0); err != nil {
			b = b[:start]
			err = fmt.Errorf("encode %s frame: %w", ev.Kind, err)
		}
	}
	e.buf = b
	if err != nil {
		e.mu.Unlock()
		e.invalid.Add(1)
		e.lastErr.Store(err.Error())
		return
	}
	e.pending++
	e.mu.Unlock()
	if wasEmpty {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// Publish makes an Emitter a Publisher (it calls Emit).
func (e *Emitter) Publish(ev Event) { e.Emit(ev) }

// Dropped is the number of events lost so far.
func (e *Emitter) Dropped() uint64 { return e.dropped.Load() }

// Stats returns the emitter's counters.
func (e *Emitter) Stats() EmitterStats {
	return EmitterStats{Sent: e.sent.Load(), Dropped: e.dropped.Load(), Invalid: e.invalid.Load(), Connects: e.connects.Load()}
}

// LastError is the most recent connection, write or encoding error ("" if none).
func (e *Emitter) LastError() string {
	s, _ := e.lastErr.Load().(string)
	return s
}

// Close writes what is queued (waiting at most FlushTimeout), closes the
// connection and stops the writer. Events still queued then are counted as
// dropped. Close is idempotent.
func (e *Emitter) Close() error {
	e.mu.Lock()
	already := e.closed
	e.closed = true
	e.mu.Unlock()
	if already {
		<-e.done
		return nil
	}
	close(e.stop)
	select {
	case <-e.done:
	case <-time.After(e.opts.FlushTimeout):
		// Give up: unblock a write stuck on a slow collector.
		close(e.abandon)
		e.connMu.Lock()
		if e.conn != nil {
			e.conn.Close()
		}
		e.connMu.Unlock()
		<-e.done
	}
	return nil
}

func (e *Emitter) connect(timeout time.Duration) bool {
	var nc net.Conn
	var err error
	if e.opts.TLS != nil && e.ep.network == "tcp" {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: e.opts.TLS}
		nc, err = d.Dial("tcp", e.ep.address)
	} else {
		nc, err = net.DialTimeout(e.ep.network, e.ep.address, timeout)
	}
	if err == nil {
		if err = e.confirm(nc); err == nil {
			if err = nc.SetWriteDeadline(time.Now().Add(e.opts.WriteTimeout)); err == nil {
				_, err = nc.Write([]byte(FramePreamble))
			}
		}
		if err != nil {
			nc.Close()
		}
	}
	if err != nil {
		e.lastErr.Store(fmt.Sprintf("connect %s: %v", e.ep, err))
		return false
	}
	e.connMu.Lock()
	e.conn = nc
	e.connMu.Unlock()
	e.connects.Add(1)
	return true
}

// confirm waits ConfirmWait for the collector's verdict on a new connection.
// The collector sends nothing on an accepted connection, so a read that times
// out is the only good answer; a TLS alert (a refused client certificate),
// EOF or data mean it refused or closed the connection.
func (e *Emitter) confirm(nc net.Conn) error {
	if err := nc.SetReadDeadline(time.Now().Add(e.opts.ConfirmWait)); err != nil {
		return err
	}
	var b [1]byte
	n, err := nc.Read(b[:])
	switch {
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		return nc.SetReadDeadline(time.Time{}) // nothing from the collector: accepted
	case errors.Is(err, io.EOF):
		return errors.New("the collector closed the connection (refused; see its refused_by)")
	case err != nil:
		return fmt.Errorf("the collector refused the connection: %w", err)
	default:
		return fmt.Errorf("the collector sent %d byte(s), which it never does: not a kvcanary collector?", n)
	}
}

func (e *Emitter) disconnect() {
	e.connMu.Lock()
	if e.conn != nil {
		e.conn.Close()
		e.conn = nil
	}
	e.connMu.Unlock()
}

// run is the writer goroutine.
func (e *Emitter) run() {
	defer close(e.done)
	defer e.disconnect()
	backoff := e.opts.MinBackoff
	var retry *time.Timer
	var retryC <-chan time.Time
	var spare []byte
	stopping := false
	for {
		if !stopping {
			select {
			case <-e.wake:
			case <-retryC:
				retryC = nil
			case <-e.stop:
				stopping = true
			}
		}
		if e.abandoned() {
			e.dropQueued()
			return
		}
		if e.conn == nil {
			if retryC != nil && !stopping {
				continue // wait for the backoff to pass; Emit keeps queueing
			}
			timeout := time.Second
			if stopping {
				timeout = e.opts.FlushTimeout
			}
			if !e.connect(timeout) {
				if stopping {
					e.dropQueued()
					return
				}
				if retry == nil {
					retry = time.NewTimer(backoff)
				} else {
					retry.Reset(backoff)
				}
				retryC = retry.C
				backoff = min(2*backoff, e.opts.MaxBackoff)
				continue
			}
			backoff = e.opts.MinBackoff
		}
		// Connected: write until the queue is empty.
		for e.conn != nil && !e.abandoned() {
			e.mu.Lock()
			if len(e.buf) == 0 {
				e.mu.Unlock()
				break
			}
			out, n := e.buf, e.pending
			e.buf, e.pending = spare[:0], 0
			e.mu.Unlock()
			e.write(out, n)
			spare = out
		}
		if !stopping {
			select {
			case <-e.stop:
				stopping = true
			default:
			}
		}
		if stopping && (e.conn != nil || e.abandoned()) {
			// Flushed (or gave up): whatever is left could not be written.
			e.dropQueued()
			return
		}
	}
}

func (e *Emitter) abandoned() bool {
	select {
	case <-e.abandon:
		return true
	default:
		return false
	}
}

// write sends one batch of n frames; on failure it counts the frames not
// written completely as dropped and drops the connection (the stream is no
// longer in step at a frame boundary).
func (e *Emitter) write(out []byte, n uint64) {
	nc := e.conn
	nc.SetWriteDeadline(time.Now().Add(e.opts.WriteTimeout))
	w, err := nc.Write(out)
	if err == nil {
		e.sent.Add(n)
		return
	}
	whole := completeFrames(out[:w])
	e.sent.Add(whole)
	e.dropped.Add(n - whole)
	e.lastErr.Store(fmt.Sprintf("write to %s: %v", e.ep, err))
	e.disconnect()
}

// completeFrames counts the whole frames at the start of b.
func completeFrames(b []byte) uint64 {
	var n uint64
	for len(b) >= frameHeaderLen {
		l := frameHeaderLen + int(binary.LittleEndian.Uint32(b))
		if l > len(b) {
			break
		}
		b = b[l:]
		n++
	}
	return n
}

func (e *Emitter) dropQueued() {
	e.mu.Lock()
	e.dropped.Add(e.pending)
	e.buf, e.pending = e.buf[:0], 0
	e.mu.Unlock()
}
