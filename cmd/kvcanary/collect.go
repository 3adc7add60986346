package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// CollectOptions are the inputs of `kvcanary collect`.
type CollectOptions struct {
	IO          *cmdutil.IOStreams
	Factory     *cmdutil.Factory
	JSON        *cmdutil.JSONFlags
	Listen      string
	Record      string
	AllowRemote bool // --insecure-remote (alias --allow-remote)
	TLS         listenTLS
	Run         string
	Limits      listenLimits
	Export      exportOptions

	// ready, when set (tests), is called once the collector is listening.
	ready func(*hook.Collector)
}

// CollectSummary is the --json shape of `kvcanary collect`.
type CollectSummary struct {
	Listen      string            `json:"listen"`
	Run         string            `json:"run"`
	DurationNS  int64             `json:"duration_ns"`
	Events      uint64            `json:"events"`
	ByKind      map[string]uint64 `json:"by_kind"`
	Connections uint64            `json:"connections"`
	Bytes       uint64            `json:"bytes"`
	Rejected    uint64            `json:"rejected"`
	RejectedBy  map[string]uint64 `json:"rejected_by"`
	LostFraming uint64            `json:"lost_framing"`
	// Refused counts connections closed as soon as they arrived (over
	// --max-conns, or no room in the buffer budget); ClosedBy every ended
	// connection by why it ended.
	Refused      uint64            `json:"refused"`
	RefusedBy    map[string]uint64 `json:"refused_by"`
	LastRefusal  string            `json:"last_refusal,omitempty"` // remote address and cause (TLS: the certificate problem)
	ClosedBy     map[string]uint64 `json:"closed_by"`
	BufferedPeak int64             `json:"buffered_peak"`
	BufferBudget int64             `json:"buffer_budget"`
	// Dropped counts events lost on the way: by the recorder after an I/O
	// error, and as reported by producers in their run.end events.
	Dropped         uint64           `json:"dropped"`
	DroppedRecorder uint64           `json:"dropped_recorder"`
	DroppedProducer uint64           `json:"dropped_producers"`
	Record          string           `json:"record,omitempty"`
	Recorded        uint64           `json:"recorded"`
	Conns           []hook.ConnStats `json:"conns,omitempty"`
}

// collectLong is the long help of `kvcanary collect`.
const collectLong = `Receive events from any number of producers at once — engine hooks, probes,
scripts — over a Unix socket or loopback TCP, and record them to a trace bundle.

ADDR is unix:///path.sock (created mode 0600) or tcp://HOST:PORT. A TCP
address other hosts could reach needs mutual TLS (--tls-cert, --tls-key,
--client-ca; kvcanary certs init makes them): producers without a valid client
certificate are refused and counted, and each certificate's subject CN becomes
its events' src.node. --insecure-remote accepts remote producers without TLS
(with a warning on every start).
Producers speak the wire protocol of runtime/hook/WIRE.md: binary frames (the Go
emitter) or JSON lines, one event object per line:

  {"v":1,"kind":"replay","ts_ns":1700000000000000000,"body":{"step":7,"bs":8,"mode":"graph","dur_ns":41000}}

Events without src or run get them from the connection (pid of a Unix-socket
peer, remote address over TCP) and from --run. Malformed input is rejected and
counted per reason; a connection whose framing is lost is closed, the others
keep going. Runs until interrupted (Ctrl-C, SIGTERM), then prints the counts.

Limits (runtime/hook/WIRE.md "Limits"); every refusal is counted and printed:
  16 MiB          a frame or JSON line; longer: rejected (bad_length, too_long),
                  the connection closed (framing lost)
  16 MiB of JSON  an event as a bundle stores it (re-encoded: '<' becomes
                  \u003c, float vectors base64): larger events are rejected at
                  ingest (too_large), never accepted and then dropped
  --buffer-budget-mib 256  bytes all connections' read buffers hold together;
                  buffers grow as bytes arrive. A connection that would pass
                  it is closed (over_budget); a new one without room for its
                  first 64 KiB buffer is refused
  --max-conns 1024         open connections; more are closed on arrival
                  (refused: conn_limit)
  --idle-timeout 5m        a connection silent between events is closed
                  (closed: idle timeout; nothing is lost)
  --stall-timeout 30s      a frame or line that gets no byte for this long is
                  dropped and its connection closed (rejected: stalled)
A value of 0 turns a limit off.`

// NewCmdCollect builds `kvcanary collect`.
func NewCmdCollect(f *cmdutil.Factory, runF func(*CollectOptions) error) *cobra.Command {
	opts := &CollectOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "collect --listen ADDR [--record FILE]",
		Short: "Receive events from engine hooks and probes; optionally record them",
		Example: `  # receive the engine hooks' events on a local socket and record them
  kvcanary collect --listen unix:///tmp/kvcanary.sock --record run.kvtrace
  kvcanary collect --listen tcp://127.0.0.1:7070 --json`,
		Long: collectLong,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Listen == "" {
				return cmdutil.UsageError("collect: --listen is required")
			}
			if err := opts.Limits.check(); err != nil {
				return err
			}
			return runOr(opts, runF, collectRun)
		},
	}
	cmd.Flags().StringVar(&opts.Listen, "listen", "", "address to listen on: unix:///path.sock or tcp://127.0.0.1:PORT")
	cmd.Flags().StringVar(&opts.Record, "record", "", "record every accepted event to this trace bundle (.kvtrace); a bundle already there is kept, renamed with its time")
	addListenSecurityFlags(cmd, &opts.TLS, &opts.AllowRemote, "")
	cmd.Flags().StringVar(&opts.Run, "run", "", "run id for events that carry none (default collect-<UTC time>)")
	addListenLimitFlags(cmd, &opts.Limits, "")
	addExportFlags(cmd, &opts.Export)
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

// maxRejectNotes bounds the rejection messages printed while running.
const maxRejectNotes = 10

func collectRun(opts *CollectOptions) error {
	now := opts.Factory.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	if opts.Run == "" {
		opts.Run = "collect-" + start.UTC().Format("20060102T150405Z")
	}
	line := pipeline.NewStatusLine(opts.IO.ErrOut, opts.IO.IsStderrTTY() && !opts.JSON.JSON, now)
	security := func(lo *hook.ListenOptions) error {
		return opts.TLS.apply(lo, opts.Listen, opts.AllowRemote, line, "collect")
	}
	c, err := listenCollector(opts.Listen, security, opts.Run, opts.Limits, true, rejectNotes(line, "collect"))
	if err != nil {
		return err
	}
	// Events flow collector -> bus -> lossless bundle writer.
	po := pipeline.Options{Record: opts.Record, KeepPrevious: true, Status: line, StatusLabel: "collect: ",
		Manifest: traces.Manifest{Tool: "kvcanary " + buildinfo.String(), Host: localHost(), Run: opts.Run, Command: "collect",
			Labels: map[string]string{"listen": c.Addr()}},
		OnRecordError: func(err error) {
			line.Printf("collect: %s; events from now on are dropped, not recorded\n", cmdutil.Quote(err.Error()))
		}}
	p, stopExport, err := opts.Export.newPipeline(factoryCtx(opts.Factory), line, exportSource{Run: opts.Run, Collector: c}, po, "")
	if err != nil {
		c.Close()
		return err
	}
	defer stopExport()
	reportKept(line, "collect", p, opts.Record)
	if !opts.JSON.JSON {
		line.Printf("collect: listening on %s (run %s)%s\n", c.Addr(), cmdutil.Quote(opts.Run), recordNote(opts.Record))
	}
	if opts.ready != nil {
		opts.ready(c)
	}
	res := p.Run(factoryCtx(opts.Factory), &pipeline.Collector{C: c, StatusOf: collectRate(now)})
	sum := collectSummaryOf(c, opts, res, now().Sub(start))
	var outErr error
	if opts.JSON.JSON {
		outErr = cmdutil.WriteJSON(opts.IO.Out, sum)
	} else {
		outErr = writeCollectSummary(opts.IO.ErrOut, sum)
	}
	switch {
	case res.SourceErr != nil:
		return cmdutil.InputError(res.SourceErr)
	case res.RecordErr != nil:
		// Exit 3 even after the Ctrl-C that ends every collect: the
		// recording failed (a full disk, an fsync error), which a script
		// must tell from a normal end (130).
		return cmdutil.FailureError(res.RecordErr)
	}
	return outErr
}

// listenCollector starts a collector on addr with the limits given; a
// remote address (and a malformed one, when badIsUsage) is a usage error.
func listenCollector(addr string, security func(*hook.ListenOptions) error, run string, limits listenLimits, badIsUsage bool, onReject func(uint64, error)) (*hook.Collector, error) {
	lo := hook.ListenOptions{Run: run, OnReject: onReject}
	limits.apply(&lo)
	if err := security(&lo); err != nil {
		return nil, err
	}
	c, err := hook.Listen(addr, lo)
	if err != nil {
		if errors.Is(err, hook.ErrRemoteRefused) || badIsUsage && errors.Is(err, hook.ErrBadAddress) {
			return nil, cmdutil.UsageError("%w", err)
		}
		return nil, cmdutil.InputError(err)
	}
	return c, nil
}

// rejectNotes prints the first maxRejectNotes rejections above the status
// line, then says the rest are only counted.
func rejectNotes(line *pipeline.StatusLine, cmd string) func(uint64, error) {
	var notes atomic.Int64
	return func(conn uint64, err error) {
		switch n := notes.Add(1); {
		case n <= maxRejectNotes:
			line.Printf("%s: connection %d: rejected %s\n", cmd, conn, cmdutil.Quote(err.Error()))
		case n == maxRejectNotes+1:
			line.Printf("%s: further rejections are counted, not shown\n", cmd)
		}
	}
}

// collectRate is collect's status: events, their rate since the last
// status, rejections and open connections.
func collectRate(now func() time.Time) func(hook.Stats) string {
	last, lastAt := uint64(0), now()
	return func(st hook.Stats) string {
		at := now()
		rate := float64(st.Events-last) / at.Sub(lastAt).Seconds()
		last, lastAt = st.Events, at
		return fmt.Sprintf("%d events (%.0f/s), %d rejected, %d open connections", st.Events, rate, st.Rejected, st.Open)
	}
}

// collectSummaryOf is the exit report: the collector's final counters
// (Serve waited for every connection) and what the recording kept.
func collectSummaryOf(c *hook.Collector, opts *CollectOptions, res pipeline.Result, took time.Duration) CollectSummary {
	st := c.Stats()
	sum := CollectSummary{
		Listen: c.Addr(), Run: opts.Run, DurationNS: int64(took),
		Events: st.Events, ByKind: orEmpty(st.ByKind), Connections: st.Connections, Bytes: st.Bytes,
		Rejected: st.Rejected, RejectedBy: orEmpty(st.RejectedBy), LostFraming: st.LostFraming,
		Refused: st.Refused, RefusedBy: orEmpty(st.RefusedBy), LastRefusal: st.LastRefusal, ClosedBy: orEmpty(st.ClosedBy),
		BufferedPeak: st.BufferedPeak, BufferBudget: st.BufferBudget,
		DroppedProducer: res.ProducerDropped, Record: opts.Record, Conns: st.Conns,
	}
	if opts.Record != "" {
		sum.Recorded = res.Recorded
		if sum.Events > sum.Recorded+res.RecordRejected {
			sum.DroppedRecorder = sum.Events - sum.Recorded - res.RecordRejected
		}
	}
	sum.Dropped = sum.DroppedRecorder + sum.DroppedProducer
	return sum
}

// reportKept says where a service's start set aside the bundle its --record
// path held (pipeline.Options.KeepPrevious): a restarted collector keeps
// the crashed run's bundle instead of truncating it.
func reportKept(w io.Writer, name string, p *pipeline.Pipeline, record string) {
	if k := p.Kept(); k != "" {
		fmt.Fprintf(w, "%s: %s held an earlier run's bundle: kept as %s\n", name, cmdutil.Quote(record), cmdutil.Quote(k))
	}
}

func recordNote(path string) string {
	if path == "" {
		return ""
	}
	return ", recording to " + cmdutil.Quote(path)
}

// writeCollectSummary prints the exit report (to stderr: collect's stdout is
// reserved for --json).
func writeCollectSummary(w io.Writer, s CollectSummary) error {
	var b strings.Builder
	fmt.Fprintf(&b, "collect: %d events from %d connections in %s\n", s.Events, s.Connections, time.Duration(s.DurationNS).Round(time.Millisecond))
	if len(s.ByKind) > 0 {
		var parts []string
		for _, k := range hook.Kinds() {
			if n := s.ByKind[k.String()]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", k, n))
			}
		}
		fmt.Fprintf(&b, "  by kind: %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "  rejected: %d", s.Rejected)
	if s.Rejected > 0 {
		var parts []string
		for _, r := range slices.Sorted(maps.Keys(s.RejectedBy)) {
			parts = append(parts, fmt.Sprintf("%s %d", r, s.RejectedBy[r]))
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	if s.LostFraming > 0 {
		fmt.Fprintf(&b, "; %d connections closed after losing framing", s.LostFraming)
	}
	b.WriteString("\n")
	if s.Refused > 0 {
		fmt.Fprintf(&b, "  refused connections: %d (%s)\n", s.Refused, countList(s.RefusedBy))
		if s.LastRefusal != "" {
			fmt.Fprintf(&b, "  last refused: %s\n", cmdutil.Quote(s.LastRefusal))
		}
	}
	if limited := limitCloses(s.ClosedBy); len(limited) > 0 {
		fmt.Fprintf(&b, "  closed by a limit: %s\n", countList(limited))
	}
	if s.BufferBudget > 0 && s.BufferedPeak > s.BufferBudget/2 {
		fmt.Fprintf(&b, "  read buffers: peak %d of the %d-byte budget\n", s.BufferedPeak, s.BufferBudget)
	}
	fmt.Fprintf(&b, "  dropped: %d (recorder %d, reported by producers %d)\n", s.Dropped, s.DroppedRecorder, s.DroppedProducer)
	if s.Record != "" {
		fmt.Fprintf(&b, "  recorded: %d events to %s\n", s.Recorded, cmdutil.Quote(s.Record))
	}
	for _, cs := range s.Conns {
		if cs.ClaimDiffers != "" {
			uid := "unknown"
			if cs.PeerUID != nil {
				uid = fmt.Sprint(*cs.PeerUID)
			}
			fmt.Fprintf(&b, "  connection %d (%s): %s; kernel peer pid %d uid %s\n",
				cs.ID, cmdutil.Quote(cs.Remote), cmdutil.Quote(cs.ClaimDiffers), cs.PeerPID, uid)
		}
		if cs.Rejected == 0 {
			continue
		}
		who := cs.Remote
		if cs.Proc != "" {
			who += " " + cs.Proc
		}
		who = cmdutil.Quote(who)
		if cs.Protocol != "" { // empty when the first bytes were neither protocol
			who += ", " + cs.Protocol
		}
		fmt.Fprintf(&b, "  connection %d (%s): %d events, %d rejected; last: %s\n",
			cs.ID, who, cs.Events, cs.Rejected, cmdutil.Quote(cs.LastError))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// countList spells counts as "a 1, b 2" in key order.
func countList(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// limitCloses keeps the connection endings a collector limit caused.
func limitCloses(closedBy map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for _, why := range []string{"idle timeout", "stalled", "over budget"} {
		if n := closedBy[why]; n > 0 {
			out[why] = n
		}
	}
	return out
}

// listenLimits are the collector resource flags of `collect` and
// `watch --listen` (ListenOptions; 0 turns a limit off).
type listenLimits struct {
	BufferBudgetMiB int
	MaxConns        int
	IdleTimeout     time.Duration
	StallTimeout    time.Duration
}

func addListenLimitFlags(cmd *cobra.Command, l *listenLimits, with string) {
	fl := cmd.Flags()
	fl.IntVar(&l.BufferBudgetMiB, "buffer-budget-mib", hook.DefaultBufferBudget>>20, with+"MiB all connections' read buffers may hold together (partial frames and lines); 0: no bound")
	fl.IntVar(&l.MaxConns, "max-conns", hook.DefaultMaxConns, with+"most open producer connections (with TLS: authenticated ones; handshakes have a budget of their own); more are closed on arrival and counted; 0: no cap")
	fl.DurationVar(&l.IdleTimeout, "idle-timeout", hook.DefaultIdleTimeout, with+"close a connection that sends nothing for this long between events; 0: never")
	fl.DurationVar(&l.StallTimeout, "stall-timeout", hook.DefaultStallTimeout, with+"drop an unfinished frame or line that gets no byte for this long, and its connection; 0: never")
}

func (l listenLimits) check() error {
	switch {
	case l.BufferBudgetMiB < 0:
		return cmdutil.UsageError("--buffer-budget-mib %d: want a size in MiB, or 0 for no bound", l.BufferBudgetMiB)
	case l.BufferBudgetMiB > 1<<30:
		return cmdutil.UsageError("--buffer-budget-mib %d: more than 1 PiB", l.BufferBudgetMiB)
	case l.MaxConns < 0:
		return cmdutil.UsageError("--max-conns %d: want a count, or 0 for no cap", l.MaxConns)
	case l.IdleTimeout < 0:
		return cmdutil.UsageError("--idle-timeout %v: want a duration, or 0 for never", l.IdleTimeout)
	case l.StallTimeout < 0:
		return cmdutil.UsageError("--stall-timeout %v: want a duration, or 0 for never", l.StallTimeout)
	}
	return nil
}

// apply sets o's limits (ListenOptions spells "none" as a negative value,
// and takes 0 as "the default").
func (l listenLimits) apply(o *hook.ListenOptions) {
	none := func(v int64) int64 {
		if v == 0 {
			return -1
		}
		return v
	}
	o.BufferBudget = none(int64(l.BufferBudgetMiB) << 20)
	o.MaxConns = int(none(int64(l.MaxConns)))
	o.IdleTimeout = time.Duration(none(int64(l.IdleTimeout)))
	o.StallTimeout = time.Duration(none(int64(l.StallTimeout)))
}

func orEmpty(m map[string]uint64) map[string]uint64 {
	if m == nil {
		return map[string]uint64{}
	}
	return m
}

// localHost describes this machine for the bundle manifest.
func localHost() hook.HostInfo {
	h, _ := os.Hostname()
	return hook.HostInfo{Hostname: h, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
}

// lockedWriter serialises writes to stderr between the progress line and
// rejection notes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
