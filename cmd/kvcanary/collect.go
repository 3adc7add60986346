package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
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
	AllowRemote bool
	Run         string
	Limits      listenLimits

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

// NewCmdCollect builds `kvcanary collect`.
func NewCmdCollect(f *cmdutil.Factory, runF func(*CollectOptions) error) *cobra.Command {
	opts := &CollectOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "collect --listen ADDR [--record FILE]",
		Short: "Receive events from engine hooks and probes; optionally record them",
		Example: `  # receive the engine hooks' events on a local socket and record them
  kvcanary collect --listen unix:///tmp/kvcanary.sock --record run.kvtrace
  kvcanary collect --listen tcp://127.0.0.1:7070 --json`,
		Long: `Receive events from any number of producers at once — engine hooks, probes,
scripts — over a Unix socket or loopback TCP, and record them to a trace bundle.

ADDR is unix:///path.sock (created mode 0600) or tcp://127.0.0.1:PORT. A TCP
address other hosts could reach is refused unless --allow-remote is given.
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
A value of 0 turns a limit off.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Listen == "" {
				return cmdutil.UsageError("collect: --listen is required")
			}
			if err := opts.Limits.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return collectRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Listen, "listen", "", "address to listen on: unix:///path.sock or tcp://127.0.0.1:PORT")
	cmd.Flags().StringVar(&opts.Record, "record", "", "record every accepted event to this trace bundle (.kvtrace)")
	cmd.Flags().BoolVar(&opts.AllowRemote, "allow-remote", false, "allow a TCP address reachable from other hosts (no authentication!)")
	cmd.Flags().StringVar(&opts.Run, "run", "", "run id for events that carry none (default collect-<UTC time>)")
	addListenLimitFlags(cmd, &opts.Limits, "")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

// maxRejectNotes bounds the rejection messages printed while running.
const maxRejectNotes = 10

func collectRun(opts *CollectOptions) error {
	ctx := opts.Factory.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	now := opts.Factory.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	if opts.Run == "" {
		opts.Run = "collect-" + start.UTC().Format("20060102T150405Z")
	}
	errOut := &lockedWriter{w: opts.IO.ErrOut}
	showProgress := opts.IO.IsStderrTTY() && !opts.JSON.JSON
	clearLine := ""
	if showProgress {
		clearLine = "\r\033[K"
	}
	notes := 0
	lo := hook.ListenOptions{
		AllowRemote: opts.AllowRemote,
		Run:         opts.Run,
		OnReject: func(conn uint64, err error) {
			errOut.mu.Lock()
			defer errOut.mu.Unlock()
			notes++
			switch {
			case notes <= maxRejectNotes:
				fmt.Fprintf(errOut.w, "%scollect: connection %d: rejected %s\n", clearLine, conn, cmdutil.Quote(err.Error()))
			case notes == maxRejectNotes+1:
				fmt.Fprintf(errOut.w, "%scollect: further rejections are counted, not shown\n", clearLine)
			}
		},
	}
	opts.Limits.apply(&lo)
	c, err := hook.Listen(opts.Listen, lo)
	if err != nil {
		if errors.Is(err, hook.ErrRemoteRefused) || errors.Is(err, hook.ErrBadAddress) {
			return cmdutil.UsageError("%w", err)
		}
		return cmdutil.InputError(err)
	}

	// Events flow collector -> bus -> lossless bundle writer. The collector
	// serialises Publish; producer-reported drops are tallied on the way.
	bus := hook.NewBus()
	var recErr chan error
	var writer *traces.Writer
	if opts.Record != "" {
		writer, err = traces.Create(opts.Record, traces.Manifest{
			Tool: "kvcanary " + buildinfo.String(), Host: localHost(), Run: opts.Run, Command: "collect",
			Labels: map[string]string{"listen": c.Addr()},
		})
		if err != nil {
			c.Close()
			return cmdutil.InputError(err)
		}
		sub := bus.Lossless("record", 8192)
		recErr = make(chan error, 1)
		go func() { recErr <- traces.Record(sub, writer) }()
	}
	var producerDropped uint64
	pub := hook.PublishFunc(func(ev hook.Event) {
		if re, ok := ev.Body.(*hook.RunEnd); ok {
			producerDropped += re.Dropped
		}
		bus.Publish(ev)
	})

	if !opts.JSON.JSON {
		fmt.Fprintf(errOut, "collect: listening on %s (run %s)%s\n", c.Addr(), cmdutil.Quote(opts.Run), recordNote(opts.Record))
	}
	if opts.ready != nil {
		opts.ready(c)
	}
	progressDone := make(chan struct{})
	progressStopped := make(chan struct{})
	go func() {
		defer close(progressStopped)
		if !showProgress {
			<-progressDone
			return
		}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last, lastAt := uint64(0), now()
		for {
			select {
			case <-progressDone:
				errOut.mu.Lock()
				fmt.Fprint(errOut.w, "\r\033[K")
				errOut.mu.Unlock()
				return
			case <-t.C:
				st := c.Stats()
				at := now()
				rate := float64(st.Events-last) / at.Sub(lastAt).Seconds()
				last, lastAt = st.Events, at
				errOut.mu.Lock()
				fmt.Fprintf(errOut.w, "\r\033[Kcollect: %d events (%.0f/s), %d rejected, %d open connections", st.Events, rate, st.Rejected, st.Open)
				errOut.mu.Unlock()
			}
		}
	}()

	serveErr := c.Serve(ctx, pub)
	close(progressDone)
	<-progressStopped
	st := c.Stats() // final: Serve waited for every connection
	if writer != nil {
		// Before the bus closes (and Record closes the writer): the footer
		// says what this recording refused at ingest.
		writer.AddRejected(st.Rejected)
	}
	bus.Close()
	sum := CollectSummary{
		Listen: c.Addr(), Run: opts.Run, DurationNS: int64(now().Sub(start)),
		Events: st.Events, ByKind: orEmpty(st.ByKind), Connections: st.Connections, Bytes: st.Bytes,
		Rejected: st.Rejected, RejectedBy: orEmpty(st.RejectedBy), LostFraming: st.LostFraming,
		Refused: st.Refused, RefusedBy: orEmpty(st.RefusedBy), ClosedBy: orEmpty(st.ClosedBy),
		BufferedPeak: st.BufferedPeak, BufferBudget: st.BufferBudget,
		DroppedProducer: producerDropped, Record: opts.Record, Conns: st.Conns,
	}
	var recordErr error
	if recErr != nil {
		recordErr = <-recErr
		sum.Recorded = writer.Count()
		if sum.Events > sum.Recorded+writer.Rejected() {
			sum.DroppedRecorder = sum.Events - sum.Recorded - writer.Rejected()
		}
	}
	sum.Dropped = sum.DroppedRecorder + sum.DroppedProducer
	var outErr error
	if opts.JSON.JSON {
		outErr = cmdutil.WriteJSON(opts.IO.Out, sum)
	} else {
		outErr = writeCollectSummary(opts.IO.ErrOut, sum)
	}
	switch {
	case serveErr != nil:
		return cmdutil.InputError(serveErr)
	case recordErr != nil:
		return cmdutil.InputError(recordErr)
	}
	return outErr
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
	fl.IntVar(&l.MaxConns, "max-conns", hook.DefaultMaxConns, with+"most open producer connections; more are closed on arrival and counted; 0: no cap")
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
