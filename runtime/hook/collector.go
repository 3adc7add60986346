package hook

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ListenOptions configure a collector.
type ListenOptions struct {
	// AllowRemote permits a TCP address that is not loopback without TLS
	// (--insecure-remote on the command line): anyone who can reach the
	// port can then send events. With TLS set it is not needed.
	AllowRemote bool
	// TLS, when set, makes a TCP collector speak TLS (ServerTLSConfig:
	// TLS 1.3, client certificates checked against its client CAs) and
	// refuse connections without a valid client certificate, counting them
	// by reason (Stats.RefusedBy tls_*). The certificate's subject CN
	// becomes src.node of the connection's events, overriding what the
	// producer claims. A non-loopback address is allowed with TLS.
	TLS *tls.Config
	// HandshakeTimeout bounds a TLS handshake (default
	// DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the TLS handshakes running at once: connections
	// not yet authenticated (default DefaultMaxHandshakes; negative: no
	// bound). MaxHandshakesPerAddr bounds those from one remote address
	// (default DefaultMaxHandshakesPerAddr; negative: no bound). A
	// connection over either is closed as soon as it is accepted and
	// counted (handshake_limit, handshake_per_addr). They are a budget of
	// their own: strangers who never finish a handshake cannot take the
	// MaxConns meant for authenticated producers.
	MaxHandshakes, MaxHandshakesPerAddr int
	// Run is the run id given to events that arrive without one.
	Run string
	// Node names the host of producers on a Unix socket (default: this
	// host's name). TCP producers are named by their remote address.
	Node string
	// OnReject, when set, is called for each rejected frame or line with
	// the connection's id and the error (which names the byte offset or
	// line). It runs on the connection's goroutine and must not block long.
	OnReject func(conn uint64, err error)
	// DrainTimeout is how long Close keeps reading what open connections
	// already sent before it closes them (default 200ms; negative: none).
	DrainTimeout time.Duration
	// BufferBudget bounds the bytes the read buffers of all connections
	// hold together: partial frames and lines, and each connection's first
	// 64 KiB buffer (default DefaultBufferBudget; negative: no bound). A
	// buffer grows only as the bytes of a frame or line arrive; a
	// connection whose buffer cannot grow within the budget is closed and
	// its frame or line counted as over_budget; a connection that cannot
	// get its first buffer is refused (Stats.Refused).
	BufferBudget int64
	// MaxConns bounds the open connections (default DefaultMaxConns;
	// negative: no bound): with TLS, the authenticated ones only (handshakes
	// have MaxHandshakes). A connection over it is closed as soon as it is
	// accepted (with TLS: authenticated) and counted in Stats.Refused.
	MaxConns int
	// IdleTimeout closes a connection that sends nothing for this long
	// between events (default DefaultIdleTimeout; negative: never).
	IdleTimeout time.Duration
	// StallTimeout closes a connection whose partial frame or line gets no
	// byte for this long, counting it as stalled (default
	// DefaultStallTimeout; negative: never).
	StallTimeout time.Duration
}

// Collector resource limits by default (ListenOptions; WIRE.md "Limits").
const (
	DefaultBufferBudget = 256 << 20
	DefaultMaxConns     = 1024
	// DefaultMaxHandshakes and DefaultMaxHandshakesPerAddr: a producer
	// handshakes once per connection, in milliseconds; a flood of
	// connections that never start TLS holds these slots for at most
	// DefaultHandshakeTimeout each, and from one address at most
	// DefaultMaxHandshakesPerAddr of them.
	DefaultMaxHandshakes        = 128
	DefaultMaxHandshakesPerAddr = 16
	DefaultIdleTimeout          = 5 * time.Minute
	DefaultStallTimeout         = 30 * time.Second
)

// withDefaults fills the zero limits with the defaults and turns negative
// ones into "none" (0).
func (o ListenOptions) withDefaults() ListenOptions {
	pick := func(v, def int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	o.BufferBudget = pick(o.BufferBudget, DefaultBufferBudget)
	o.MaxConns = int(pick(int64(o.MaxConns), DefaultMaxConns))
	o.MaxHandshakes = int(pick(int64(o.MaxHandshakes), DefaultMaxHandshakes))
	o.MaxHandshakesPerAddr = int(pick(int64(o.MaxHandshakesPerAddr), DefaultMaxHandshakesPerAddr))
	o.IdleTimeout = time.Duration(pick(int64(o.IdleTimeout), int64(DefaultIdleTimeout)))
	o.StallTimeout = time.Duration(pick(int64(o.StallTimeout), int64(DefaultStallTimeout)))
	return o
}

// Collector ingests events from many producers over one socket. Create it
// with Listen and run it with Serve.
type Collector struct {
	ln    net.Listener
	ep    endpoint
	opts  ListenOptions
	node  string
	sock  os.FileInfo // the Unix socket file we created, to remove on Close
	pubMu sync.Mutex  // serialises Publish: the Publisher need not be concurrency-safe

	closeOnce sync.Once
	done      chan struct{}
	ctx       context.Context // cancelled by Close: ends pending TLS handshakes
	cancel    context.CancelFunc

	handshaking int            // TLS handshakes running (under mu)
	handshakeBy map[string]int // TLS handshakes running by remote address (under mu)
	lastRefusal atomic.Value   // string: why the last connection was refused
	drainAt     atomic.Int64   // UnixNano deadline of the drain Close started; set before done closes

	mem       memBudget
	refused   atomic.Uint64
	refusedBy [refuseLimit]atomic.Uint64
	closedBy  sync.Map // close reason -> *atomic.Uint64

	nextID      atomic.Uint64
	connections atomic.Uint64
	events      atomic.Uint64
	bytes       atomic.Uint64
	rejected    atomic.Uint64
	lostFraming atomic.Uint64
	byReason    [reasonLimit]atomic.Uint64
	byKind      [kindLimit]atomic.Uint64

	mu     sync.Mutex
	open   map[*conn]struct{}
	closed []ConnStats // most recent last, at most keepClosed
	// Producers whose connections sent events and ended, none of them
	// with a run.end (under mu): keyed by producer (node, pid) when
	// the pid is known, else by connection; a later run.end from the same
	// producer (a reconnect) takes it out. At most keepNoRunEnd keys; the
	// rest are counted in noRunEndMore.
	noRunEnd     map[string]string // key -> source description
	noRunEndMore uint64
	runEnded     map[string]bool // producers that sent a run.end (bounded like noRunEnd)
}

const keepClosed = 64

// keepNoRunEnd bounds the producers a collector remembers for
// Stats.EndedWithoutRunEnd; Stats.EndedWithoutRunEndSources lists at most
// listNoRunEnd of them.
const (
	keepNoRunEnd = 4096
	listNoRunEnd = 16
)

// maxUnixPath is the longest Unix socket path Linux accepts (sun_path less
// its terminating NUL).
const maxUnixPath = 107

// Stats is a snapshot of a collector's counters.
type Stats struct {
	Connections uint64            `json:"connections"` // accepted since start
	Open        int               `json:"open"`
	Events      uint64            `json:"events"` // published
	Bytes       uint64            `json:"bytes"`  // read from producers
	Rejected    uint64            `json:"rejected"`
	RejectedBy  map[string]uint64 `json:"rejected_by,omitempty"` // reason -> count
	LostFraming uint64            `json:"lost_framing"`          // connections closed because framing was lost
	// Refused counts connections closed as soon as they were accepted: over
	// MaxConns ("conn_limit") or without room in the buffer budget for their
	// first buffer ("over_budget").
	Refused   uint64            `json:"refused"`
	RefusedBy map[string]uint64 `json:"refused_by,omitempty"`
	// LastRefusal says why the last refused connection was refused, with
	// its remote address (TLS refusals name the certificate problem).
	LastRefusal string `json:"last_refusal,omitempty"`
	// ClosedBy counts ended connections by why they ended (ConnStats.Closed).
	ClosedBy map[string]uint64 `json:"closed_by,omitempty"`
	// Buffered is the bytes connection buffers hold now, BufferedPeak the
	// most they held at once, BufferBudget their bound (0: none).
	Buffered     int64             `json:"buffered"`
	BufferedPeak int64             `json:"buffered_peak"`
	BufferBudget int64             `json:"buffer_budget"`
	ByKind       map[string]uint64 `json:"by_kind,omitempty"`
	// EndedWithoutRunEnd counts producers that sent events and whose
	// connections all ended without a run.end: killed (SIGKILL, OOM), cut
	// off by the collector, or a producer that never sends one. What they
	// dropped or switched off is unknown. A producer still connected is
	// not counted. EndedWithoutRunEndSources names at most 16 of them
	// ("proc pid N on NODE" or the connection's remote).
	EndedWithoutRunEnd        uint64      `json:"ended_without_run_end,omitempty"`
	EndedWithoutRunEndSources []string    `json:"ended_without_run_end_sources,omitempty"`
	Conns                     []ConnStats `json:"conns,omitempty"` // open connections, then recently closed ones
}

// ConnStats describes one producer connection.
type ConnStats struct {
	ID       uint64 `json:"id"`
	Remote   string `json:"remote,omitempty"`
	PID      int32  `json:"pid,omitempty"`
	Proc     string `json:"proc,omitempty"`
	Identity string `json:"identity,omitempty"` // TLS client certificate subject CN (the events' src.node)
	// PeerPID and PeerUID are the kernel's account of the producer (Unix
	// socket: SO_PEERCRED; loopback TCP: the socket's owner), beside what it
	// claims in src; absent when unknown. ClaimDiffers says where an event's
	// claimed pid differed from PeerPID (another pid namespace, or a lie),
	// with how many events did.
	PeerPID      int32             `json:"peer_pid,omitempty"`
	PeerUID      *int64            `json:"peer_uid,omitempty"`
	ClaimDiffers string            `json:"claim_differs,omitempty"`
	Protocol     string            `json:"protocol,omitempty"` // "frames" | "jsonl"
	Events       uint64            `json:"events"`
	Bytes        uint64            `json:"bytes"`
	Rejected     uint64            `json:"rejected"`
	RejectedBy   map[string]uint64 `json:"rejected_by,omitempty"`
	Open         bool              `json:"open"`
	RunEnd       bool              `json:"run_end,omitempty"` // a run.end arrived on it
	Closed       string            `json:"closed,omitempty"`  // why it ended: "eof", "lost framing", "shutdown", "read error", "idle timeout", "stalled", "over budget"
	LastError    string            `json:"last_error,omitempty"`
}

// Listen opens a collector socket: addr is unix:///path.sock (created 0600; a
// stale socket file is replaced, a live one or a non-socket file is not) or
// tcp://HOST:PORT (loopback only unless opts.AllowRemote).
func Listen(addr string, opts ListenOptions) (*Collector, error) {
	ep, err := parseAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	opts = opts.withDefaults()
	c := &Collector{ep: ep, opts: opts, done: make(chan struct{}), open: map[*conn]struct{}{},
		noRunEnd: map[string]string{}, runEnded: map[string]bool{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mem.limit = opts.BufferBudget
	c.node = opts.Node
	if c.node == "" {
		c.node, _ = os.Hostname()
	}
	switch ep.network {
	case "unix":
		c.ln, c.sock, err = listenUnix(ep)
	default:
		if !opts.AllowRemote && opts.TLS == nil {
			if err := checkLoopback(ep); err != nil {
				return nil, err
			}
		}
		c.ln, err = net.Listen("tcp", ep.address)
		if err == nil {
			c.ep.address = c.ln.Addr().String()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", ep, err)
	}
	return c, nil
}

// listenUnix binds a socket under a private temporary name, makes it 0600,
// then renames it into place, so the final path is never connectable with
// looser permissions.
func listenUnix(ep endpoint) (net.Listener, os.FileInfo, error) {
	path := ep.address
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
		}
		c, err := net.DialTimeout("unix", path, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil, nil, fmt.Errorf("%s is in use by a running collector", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, fmt.Errorf("cannot tell whether %s is stale (%w); remove it if no collector uses it", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(path), ".k"+hex.EncodeToString(rnd[:]))
	if len(tmp) > maxUnixPath && len(path) <= maxUnixPath {
		tmp = path // the private name would not fit: bind in place, then chmod
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, nil, fmt.Errorf("chmod socket: %w", err)
	}
	if tmp != path {
		if err := os.Rename(tmp, path); err != nil {
			ln.Close()
			os.Remove(tmp)
			return nil, nil, fmt.Errorf("place socket: %w", err)
		}
	}
	fi, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	return ln, fi, nil
}

// Addr is the collector's address in the form Dial takes (with the real
// port when tcp://…:0 was given).
func (c *Collector) Addr() string { return c.ep.String() }

// Close stops accepting, removes the Unix socket file, and ends every
// connection after reading, for at most DrainTimeout, what it already sent.
// Serve returns once every connection has ended.
func (c *Collector) Close() error {
	var err error
	c.closeOnce.Do(func() {
		grace := c.opts.DrainTimeout
		if grace == 0 {
			grace = 200 * time.Millisecond
		}
		deadline := time.Now().Add(max(grace, 0))
		// Stored before done closes: a reader that sees done closed uses it.
		c.drainAt.Store(deadline.UnixNano())
		close(c.done)
		c.cancel()
		err = c.ln.Close()
		if c.sock != nil {
			if fi, serr := os.Lstat(c.ep.address); serr == nil && os.SameFile(fi, c.sock) {
				os.Remove(c.ep.address)
			}
		}
		// Let each handler read what is already in flight, then end it.
		c.mu.Lock()
		for cn := range c.open {
			if grace <= 0 || cn.nc.SetReadDeadline(deadline) != nil {
				cn.nc.Close()
			}
		}
		c.mu.Unlock()
	})
	return err
}

// Serve accepts producers until ctx is cancelled or Close is called, and
// publishes every accepted event to pub. Publishes are serialised, so pub
// need not be safe for concurrent use; a slow pub slows every producer (a
// lossless bus subscriber does exactly that). Serve closes the collector
// before it returns and waits for every connection to finish. It returns nil
// after ctx cancellation or Close.
func (c *Collector) Serve(ctx context.Context, pub Publisher) error {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.Close()
	var backoff time.Duration
	for {
		nc, err := c.ln.Accept()
		if err != nil {
			select {
			case <-c.done:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				// Out of descriptors or a transient failure: wait and retry.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-c.done:
					return nil
				}
				continue
			}
			return fmt.Errorf("accept on %s: %w", c.ep, err)
		}
		backoff = 0
		if c.opts.TLS != nil && c.ep.network == "tcp" {
			// Unauthenticated: the handshake budget, not MaxConns. Closed at
			// once when over it, before any per-connection work.
			addr := remoteHost(nc)
			if why := c.startHandshake(addr); why >= 0 {
				c.refuseNow(nc, why)
				continue
			}
			// The handshake runs on the connection's goroutine: a slow or
			// hostile client never holds up the accept loop.
			wg.Add(1)
			go func() {
				defer wg.Done()
				tc, node, why, err := c.handshake(nc)
				c.endHandshake(addr)
				if err != nil {
					nc.Close()
					c.refuse(why)
					c.lastRefusal.Store(fmt.Sprintf("%s: %s: %v", remoteName(nc), refuseNames[why], err))
					return
				}
				if c.full() {
					c.refuseNow(tc, refuseConnLimit)
					return
				}
				cn := c.newConn(tc)
				cn.src.Node, cn.authNode = node, true
				if c.register(cn) {
					c.finish(cn, c.handle(cn, pub))
				}
			}()
			continue
		}
		if c.full() {
			// Closed at once, before any per-connection work: a flood of
			// idle connections costs a descriptor for microseconds each
			// and never holds up the producers already connected.
			c.refuseNow(nc, refuseConnLimit)
			continue
		}
		cn := c.newConn(nc)
		if !c.register(cn) {
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.finish(cn, c.handle(cn, pub))
		}()
	}
}

// full reports whether MaxConns producers are connected.
func (c *Collector) full() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opts.MaxConns > 0 && len(c.open) >= c.opts.MaxConns
}

// refuseNow closes a connection refused on arrival and counts why.
func (c *Collector) refuseNow(nc net.Conn, why int) {
	nc.Close()
	c.refuse(why)
	c.lastRefusal.Store(remoteName(nc) + ": " + refuseNames[why] + ": " + refuseWhy[why])
}

// startHandshake takes a handshake slot for a connection from addr, or
// returns why there is none (>= 0).
func (c *Collector) startHandshake(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.opts.MaxHandshakes > 0 && c.handshaking >= c.opts.MaxHandshakes:
		return refuseHandshakeLimit
	case c.opts.MaxHandshakesPerAddr > 0 && c.handshakeBy[addr] >= c.opts.MaxHandshakesPerAddr:
		return refuseHandshakePerAddr
	}
	if c.handshakeBy == nil {
		c.handshakeBy = map[string]int{}
	}
	c.handshaking++
	c.handshakeBy[addr]++
	return -1
}

func (c *Collector) endHandshake(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handshaking--
	if c.handshakeBy[addr]--; c.handshakeBy[addr] <= 0 {
		delete(c.handshakeBy, addr)
	}
}

// remoteHost is nc's remote IP address (its whole address when it has no
// port).
func remoteHost(nc net.Conn) string {
	a := remoteName(nc)
	if host, _, err := net.SplitHostPort(a); err == nil {
		return host
	}
	return a
}

// remoteName is nc's remote address, or "unix" when it has none.
func remoteName(nc net.Conn) string {
	if a := nc.RemoteAddr(); a != nil && a.String() != "" {
		return a.String()
	}
	return "unix"
}

// register adds cn to the open connections; false (and cn closed) when the
// collector is closing.
func (c *Collector) register(cn *conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		cn.nc.Close()
		return false
	default:
	}
	// Counted and registered together, under c.mu: Stats sees
	// Connections, Open and Conns as one snapshot.
	c.connections.Add(1)
	c.open[cn] = struct{}{}
	return true
}

// conn is one producer connection.
type conn struct {
	nc       net.Conn
	id       uint64
	remote   string
	src      Source               // defaults filled into events
	authNode bool                 // src.Node is the TLS client certificate's CN: it overrides the producer's
	peer     atomic.Pointer[peer] // the kernel's account of the producer; nil until looked up
	claimed  atomic.Value         // string: the first claimed pid that differed from the peer's
	differ   atomic.Uint64        // events whose claimed pid differed from the peer's
	protocol atomic.Value
	events   atomic.Uint64
	bytes    atomic.Uint64
	rejected atomic.Uint64
	byReason [reasonLimit]atomic.Uint64
	lastErr  atomic.Value // string
	runEnd   atomic.Bool  // a run.end arrived
	producer atomic.Value // string: the producer key of its last event (see producerKey)
	who      atomic.Value // string: the producer as the last event named it
}

func (c *Collector) newConn(nc net.Conn) *conn {
	cn := &conn{nc: nc, id: c.nextID.Add(1)}
	cn.src.Node = c.node
	if c.ep.network == "unix" {
		p := peerProcess(nc) // SO_PEERCRED: cheap, here
		cn.peer.Store(&p)
		cn.src.PID, cn.src.Proc = p.PID, p.Proc
		if cn.src.PID != 0 {
			cn.remote = fmt.Sprintf("pid %d", cn.src.PID)
		} else {
			cn.remote = "unix"
		}
	} else {
		cn.remote = nc.RemoteAddr().String()
		if host, _, err := net.SplitHostPort(cn.remote); err == nil {
			cn.src.Node = host
		}
	}
	return cn
}

// Why connections are refused (Stats.RefusedBy keys).
const (
	refuseConnLimit = iota
	refuseOverBudget
	refuseTLSNoCert        // TLS: the client sent no certificate
	refuseTLSUnknownCA     // TLS: signed by a CA the collector does not trust
	refuseTLSExpired       // TLS: expired or not yet valid
	refuseTLSBadCert       // TLS: otherwise invalid (wrong key usage, no CN, …)
	refuseTLSHandshake     // TLS: not TLS, an old version, a timeout, …
	refuseHandshakeLimit   // TLS: MaxHandshakes handshakes already running
	refuseHandshakePerAddr // TLS: MaxHandshakesPerAddr handshakes from the address already running
	refuseLimit
)

var refuseNames = [refuseLimit]string{refuseConnLimit: "conn_limit", refuseOverBudget: "over_budget",
	refuseTLSNoCert: "tls_no_cert", refuseTLSUnknownCA: "tls_unknown_ca", refuseTLSExpired: "tls_expired",
	refuseTLSBadCert: "tls_bad_cert", refuseTLSHandshake: "tls_handshake",
	refuseHandshakeLimit: "handshake_limit", refuseHandshakePerAddr: "handshake_per_addr"}

// refuseWhy says what a refusal on arrival means (Stats.LastRefusal).
var refuseWhy = [refuseLimit]string{refuseConnLimit: "over the connection limit",
	refuseHandshakeLimit: "too many TLS handshakes running", refuseHandshakePerAddr: "too many TLS handshakes running from this address"}

func (c *Collector) refuse(why int) {
	c.refused.Add(1)
	c.refusedBy[why].Add(1)
}

// connReader reads a connection: it counts bytes and, before each read,
// makes sure the deadline that applies is set: the stall timeout while the
// decoder holds part of a frame or line, the idle timeout between events.
// A deadline is set up to an eighth of the timeout later than needed, so a
// busy connection moves it once per eighth, not on every read.
type connReader struct {
	c        *Collector
	cn       *conn
	partial  func() int // bytes of an unfinished frame or line held; nil: none
	stalled  bool       // the deadline in force is the stall timeout's
	deadline time.Time  // the deadline in force; zero: none
}

func (r *connReader) Read(p []byte) (int, error) {
	timeout := r.c.opts.IdleTimeout
	stalled := r.partial != nil && r.partial() > 0
	if stalled {
		timeout = r.c.opts.StallTimeout
	}
	set := false
	if timeout > 0 {
		due := time.Now().Add(timeout)
		if stalled != r.stalled || r.deadline.Before(due) || r.deadline.After(due.Add(timeout/8)) {
			r.deadline, set = due.Add(timeout/8), true
		}
	} else if !r.deadline.IsZero() {
		r.deadline, set = time.Time{}, true
	}
	if set {
		r.cn.nc.SetReadDeadline(r.deadline)
		select {
		case <-r.c.done: // closing: the drain deadline Close set wins over ours
			if drain := time.Unix(0, r.c.drainAt.Load()); r.deadline.IsZero() || drain.Before(r.deadline) {
				r.deadline = drain
				r.cn.nc.SetReadDeadline(drain)
			}
		default:
		}
	}
	r.stalled = stalled
	n, err := r.cn.nc.Read(p)
	r.cn.bytes.Add(uint64(n))
	r.c.bytes.Add(uint64(n))
	return n, err
}

// decoder is a FrameDecoder or a JSONLinesDecoder.
type decoder interface {
	Decode() (Event, error)
	buffered() int
	lastDecoded() *decoded // updated by each Decode that returns an event
	release()
}

// handle reads one connection until it ends and says why it ended.
func (c *Collector) handle(cn *conn, pub Publisher) (closed string) {
	if cn.peer.Load() == nil {
		// Loopback TCP: the owner is found in /proc, on this connection's
		// goroutine, never in the accept loop.
		raw := cn.nc
		if tc, ok := raw.(*tls.Conn); ok {
			raw = tc.NetConn()
		}
		p := peerProcess(raw)
		cn.peer.Store(&p)
	}
	r := &connReader{c: c, cn: cn}
	var tsLimit int64 // ts_ns up to it pass checkTS without a clock read
	var first [1]byte
	if _, err := io.ReadFull(r, first[:]); err != nil {
		select {
		case <-c.done:
			return "shutdown" // an idle connection ended by Close
		default:
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return "idle timeout"
		}
		return "eof"
	}
	var dec decoder
	switch first[0] {
	case '{', ' ', '\t', '\r', '\n':
		cn.protocol.Store("jsonl")
		if d := newBudgetJSONLinesDecoder(io.MultiReader(bytes.NewReader(first[:]), r), &c.mem); d != nil {
			dec = d
		}
	default:
		var rest [len(FramePreamble) - 1]byte
		r.partial = func() int { return 1 } // inside the preamble
		n, err := io.ReadFull(r, rest[:])
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			select {
			case <-c.done:
				return "shutdown"
			default:
			}
			c.reject(cn, &WireError{Reason: ReasonStalled, Fatal: true,
				Err: fmt.Errorf("no byte of the preamble for %v after %q (--stall-timeout): %w", c.opts.StallTimeout, append(first[:], rest[:n]...), os.ErrDeadlineExceeded)})
			return "stalled"
		}
		if err != nil || first[0] != FramePreamble[0] || string(rest[:]) != FramePreamble[1:] {
			got := append(first[:], rest[:n]...) // only what arrived: no NUL padding
			c.reject(cn, &WireError{Reason: ReasonBadPreamble, Fatal: true,
				Err: fmt.Errorf("connection starts with %q: neither JSON lines ('{') nor the frame preamble %q", got, FramePreamble)})
			c.lostFraming.Add(1)
			return "lost framing"
		}
		cn.protocol.Store("frames")
		if fd := newBudgetFrameDecoder(r, &c.mem); fd != nil {
			fd.SetOffset(int64(len(FramePreamble)))
			dec = fd
		}
	}
	if dec == nil {
		c.refuse(refuseOverBudget)
		cn.lastErr.Store((&budgetError{limit: c.mem.limit}).Error())
		return "over budget"
	}
	defer dec.release()
	r.partial = dec.buffered
	last := dec.lastDecoded()
	for {
		ev, err := dec.Decode()
		if err != nil {
			if err == io.EOF {
				return "eof"
			}
			select {
			case <-c.done:
				return "shutdown"
			default:
			}
			var we *WireError
			if !errors.As(err, &we) {
				cn.lastErr.Store(err.Error())
				return "read error"
			}
			if errors.Is(we.Err, os.ErrDeadlineExceeded) {
				if !r.stalled {
					return "idle timeout"
				}
				c.reject(cn, &WireError{Offset: we.Offset, Line: we.Line, Reason: ReasonStalled, Fatal: true,
					Err: fmt.Errorf("no byte of the unfinished frame or line for %v (--stall-timeout): %w", c.opts.StallTimeout, os.ErrDeadlineExceeded)})
				return "stalled"
			}
			if we.Reason == ReasonOverBudget {
				c.reject(cn, we)
				return "over budget"
			}
			if we.Reason == ReasonTruncated && !errors.Is(we.Err, io.ErrUnexpectedEOF) {
				// A read error (reset by peer), not a cut frame.
				cn.lastErr.Store(err.Error())
				return "read error"
			}
			c.reject(cn, we)
			if we.Fatal {
				c.lostFraming.Add(1)
				return "lost framing"
			}
			continue
		}
		if ev.Src.Node == "" || cn.authNode {
			ev.Src.Node = cn.src.Node
		}
		if ev.Src.PID == 0 {
			ev.Src.PID = cn.src.PID
		} else if p := cn.peer.Load(); p != nil && p.PID != 0 && ev.Src.PID != p.PID {
			if cn.differ.Add(1) == 1 {
				cn.claimed.Store(fmt.Sprintf("claimed pid %d, the kernel says pid %d", ev.Src.PID, p.PID))
			}
		}
		if ev.Src.Proc == "" {
			ev.Src.Proc = cn.src.Proc
		}
		if ev.Run == "" {
			ev.Run = c.opts.Run
		}
		if ev.TS == 0 {
			ev.TS = time.Now().UnixNano() // arrival time for producers without a clock
		}
		if ev.TS < 0 || ev.TS > tsLimit {
			// The clock is read only past the last limit (a limit read
			// earlier is lower than today's: never a false refusal).
			now := time.Now().UnixNano()
			tsLimit = now + min(int64(MaxTSAhead), math.MaxInt64-now)
			if terr := checkTS(ev.TS, now); terr != nil {
				c.reject(cn, &WireError{Offset: last.off, Line: last.line, Reason: ReasonBadValue, Err: terr})
				continue
			}
		}
		// The bundle writer's rule, applied here: what a recording would
		// refuse is refused (and counted) at ingest, never accepted and then
		// dropped.
		if !admitQuick(last.size, last.jsonBody, len(ev.Src.Node)+len(ev.Src.Proc)+len(ev.Src.Role)+len(ev.Run)) {
			if aerr := AdmitEvent(ev, last.size, last.jsonBody); aerr != nil {
				reason := ReasonTooLarge
				if !errors.Is(aerr, ErrTooLarge) {
					reason = ReasonBadValue
				}
				c.reject(cn, &WireError{Offset: last.off, Line: last.line, Reason: reason, Err: aerr})
				continue
			}
		}
		if cn.events.Load() == 0 || ev.Kind == KindRunEnd {
			c.noteProducer(cn, ev)
		}
		c.pubMu.Lock()
		pub.Publish(ev)
		c.pubMu.Unlock()
		cn.events.Add(1)
		c.events.Add(1)
		c.byKind[ev.Kind].Add(1)
	}
}

// MaxTSAhead is how far past the collector's clock an event's ts_ns may be.
// A timestamp is only refused when it cannot be a time at all: negative, or
// further ahead than any clock skew between producer and collector hosts
// could explain (skew is seconds, a wrong time zone hours; a day covers
// both). Small positive timestamps (the twin and tests count 1, 2, …) are
// kept. Without this bound one stray ts_ns (math.MaxInt64, say) stretches a
// bundle's span past what int64 holds and a paced replay waits for years.
const MaxTSAhead = 24 * time.Hour

// checkTS is the collector's ts_ns rule (see MaxTSAhead); now is its clock
// in Unix nanoseconds.
func checkTS(ts, now int64) error {
	if ts < 0 {
		return fmt.Errorf("ts_ns %d is negative", ts)
	}
	if now <= math.MaxInt64-int64(MaxTSAhead) && ts > now+int64(MaxTSAhead) {
		return fmt.Errorf("ts_ns %d is more than %v ahead of the collector's clock (%d)", ts, MaxTSAhead, now)
	}
	return nil
}

func (c *Collector) reject(cn *conn, we *WireError) {
	r := we.Reason
	if r >= reasonLimit {
		r = ReasonBadBody
	}
	cn.rejected.Add(1)
	cn.byReason[r].Add(1)
	c.rejected.Add(1)
	c.byReason[r].Add(1)
	cn.lastErr.Store(we.Error())
	if c.opts.OnReject != nil {
		c.opts.OnReject(cn.id, we)
	}
}

// noteProducer names cn's producer from an event of it (its first, and
// each run.end) and, for a run.end, marks the producer as ended properly.
func (c *Collector) noteProducer(cn *conn, ev Event) {
	key := fmt.Sprintf("conn %d", cn.id)
	if ev.Src.PID != 0 {
		key = fmt.Sprintf("%s\x00%d", ev.Src.Node, ev.Src.PID)
	}
	who := cn.remote
	if ev.Src.PID != 0 {
		who = fmt.Sprintf("%s pid %d", ev.Src.Proc, ev.Src.PID)
		if ev.Src.Node != "" && ev.Src.Node != c.node {
			who += " on " + ev.Src.Node
		}
	} else if ev.Src.Proc != "" {
		who = fmt.Sprintf("%s (%s)", ev.Src.Proc, cn.remote)
	}
	cn.producer.Store(key)
	cn.who.Store(who)
	if ev.Kind != KindRunEnd {
		return
	}
	cn.runEnd.Store(true)
	c.mu.Lock()
	delete(c.noRunEnd, key)
	if len(c.runEnded) < keepNoRunEnd {
		c.runEnded[key] = true
	}
	c.mu.Unlock()
}

func (c *Collector) finish(cn *conn, closed string) {
	cn.nc.Close()
	st := cn.stats()
	st.Closed = closed
	n, _ := c.closedBy.LoadOrStore(closed, new(atomic.Uint64))
	n.(*atomic.Uint64).Add(1)
	c.mu.Lock()
	if !st.RunEnd && st.Events+st.Rejected > 0 {
		key, _ := cn.producer.Load().(string)
		who, _ := cn.who.Load().(string)
		if key == "" { // only rejected lines: nothing named the producer
			key, who = fmt.Sprintf("conn %d", cn.id), cn.remote
		}
		switch {
		case c.runEnded[key]:
			// an earlier connection of this producer sent its run.end
		case len(c.noRunEnd) < keepNoRunEnd:
			c.noRunEnd[key] = who
		default:
			if _, ok := c.noRunEnd[key]; !ok {
				c.noRunEndMore++
			}
		}
	}
	delete(c.open, cn)
	c.closed = append(c.closed, st)
	if len(c.closed) > keepClosed {
		c.closed = append(c.closed[:0], c.closed[len(c.closed)-keepClosed:]...)
	}
	c.mu.Unlock()
}

func (cn *conn) stats() ConnStats {
	st := ConnStats{ID: cn.id, Remote: cn.remote, PID: cn.src.PID, Proc: cn.src.Proc,
		Identity: cn.identity(), RunEnd: cn.runEnd.Load(),
		Events: cn.events.Load(), Bytes: cn.bytes.Load(), Rejected: cn.rejected.Load()}
	if p, ok := cn.protocol.Load().(string); ok {
		st.Protocol = p
	}
	if e, ok := cn.lastErr.Load().(string); ok {
		st.LastError = e
	}
	st.RejectedBy = reasonMap(&cn.byReason)
	if p := cn.peer.Load(); p != nil {
		st.PeerPID = p.PID
		if p.UID >= 0 {
			uid := p.UID
			st.PeerUID = &uid
		}
	}
	if s, ok := cn.claimed.Load().(string); ok {
		st.ClaimDiffers = fmt.Sprintf("%s (%d events)", s, cn.differ.Load())
	}
	return st
}

func (cn *conn) identity() string {
	if cn.authNode {
		return cn.src.Node
	}
	return ""
}

func reasonMap(counts *[reasonLimit]atomic.Uint64) map[string]uint64 {
	var m map[string]uint64
	for r := ReasonNone + 1; r < reasonLimit; r++ {
		if n := counts[r].Load(); n > 0 {
			if m == nil {
				m = map[string]uint64{}
			}
			m[r.String()] = n
		}
	}
	return m
}

// Stats returns a snapshot of the counters. Safe to call at any time.
func (c *Collector) Stats() Stats {
	st := Stats{
		Events:       c.events.Load(),
		Bytes:        c.bytes.Load(),
		Rejected:     c.rejected.Load(),
		LostFraming:  c.lostFraming.Load(),
		RejectedBy:   reasonMap(&c.byReason),
		Refused:      c.refused.Load(),
		Buffered:     c.mem.used.Load(),
		BufferedPeak: c.mem.peak.Load(),
		BufferBudget: c.mem.limit,
	}
	if why, ok := c.lastRefusal.Load().(string); ok {
		st.LastRefusal = why
	}
	for i, name := range refuseNames {
		if n := c.refusedBy[i].Load(); n > 0 {
			if st.RefusedBy == nil {
				st.RefusedBy = map[string]uint64{}
			}
			st.RefusedBy[name] = n
		}
	}
	c.closedBy.Range(func(k, v any) bool {
		if st.ClosedBy == nil {
			st.ClosedBy = map[string]uint64{}
		}
		st.ClosedBy[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	for k := KindRunStart; k < kindLimit; k++ {
		if n := c.byKind[k].Load(); n > 0 {
			if st.ByKind == nil {
				st.ByKind = map[string]uint64{}
			}
			st.ByKind[k.String()] = n
		}
	}
	c.mu.Lock()
	st.Connections = c.connections.Load()
	st.Open = len(c.open)
	for cn := range c.open {
		s := cn.stats()
		s.Open = true
		st.Conns = append(st.Conns, s)
	}
	sort.Slice(st.Conns, func(i, j int) bool { return st.Conns[i].ID < st.Conns[j].ID })
	st.Conns = append(st.Conns, c.closed...)
	st.EndedWithoutRunEnd = uint64(len(c.noRunEnd)) + c.noRunEndMore
	for _, who := range c.noRunEnd {
		st.EndedWithoutRunEndSources = append(st.EndedWithoutRunEndSources, who)
	}
	c.mu.Unlock()
	sort.Strings(st.EndedWithoutRunEndSources)
	if len(st.EndedWithoutRunEndSources) > listNoRunEnd {
		st.EndedWithoutRunEndSources = st.EndedWithoutRunEndSources[:listNoRunEnd]
	}
	return st
}

// memBudget accounts the read buffers of a collector's connections against
// one limit. A nil *memBudget accounts nothing and refuses nothing.
type memBudget struct {
	limit int64 // ≤ 0: count, never refuse
	used  atomic.Int64
	peak  atomic.Int64
}

// budgetError is a buffer growth the budget refused.
type budgetError struct {
	need, have int // bytes the frame or line needs buffered, bytes it has
	limit      int64
}

func (e *budgetError) Error() string {
	return fmt.Sprintf("the collector's %d-byte memory budget for connection buffers (--buffer-budget-mib) is used up", e.limit)
}

func (m *memBudget) reserve(n int) bool {
	if m == nil {
		return true
	}
	for {
		u := m.used.Load()
		if m.limit > 0 && u+int64(n) > m.limit {
			return false
		}
		if m.used.CompareAndSwap(u, u+int64(n)) {
			for p := m.peak.Load(); u+int64(n) > p && !m.peak.CompareAndSwap(p, u+int64(n)); p = m.peak.Load() {
			}
			return true
		}
	}
}

func (m *memBudget) release(n int) {
	if m != nil {
		m.used.Add(-int64(n))
	}
}

// grow returns a buffer of size want holding buf[:keep], with the growth
// reserved; false when the budget cannot hold it (buf is then unchanged).
func (m *memBudget) grow(buf []byte, keep, want int) ([]byte, bool) {
	if want <= len(buf) {
		return buf, true
	}
	if !m.reserve(want - len(buf)) {
		return buf, false
	}
	nb := make([]byte, want)
	copy(nb, buf[:keep])
	return nb, true
}

// shrink returns a buffer of size want holding buf[start:end] at its front
// and gives the difference back.
func (m *memBudget) shrink(buf []byte, start, end, want int) []byte {
	nb := make([]byte, want)
	copy(nb, buf[start:end])
	m.release(len(buf) - want)
	return nb
}
