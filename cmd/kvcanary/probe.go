package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/cudaprobe"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// cudaProbe is what `probe cuda` needs from an attached probe (tests fake it).
type cudaProbe interface {
	Lib() string
	Targets() []cudaprobe.Target
	Run(ctx context.Context, fn func(hook.CUDA)) error
	Lost() (cudaprobe.Lost, error)
	Close() error
}

// ProbeCUDAOptions are the inputs of `kvcanary probe cuda`.
type ProbeCUDAOptions struct {
	IO       *cmdutil.IOStreams
	JSON     *cmdutil.JSONFlags
	Ctx      context.Context
	Now      func() time.Time
	PID      int
	Lib      string
	Record   string
	Emit     string // collector the calls also stream to
	Duration time.Duration
	Run      string
	// Open attaches the probe; tests inject a fake.
	Open func(cudaprobe.Config) (cudaProbe, error)
}

// ProbeCUDAReport is the --json shape of `kvcanary probe cuda`.
type ProbeCUDAReport struct {
	Lib        string            `json:"lib"`
	PID        int               `json:"pid,omitempty"`
	Targets    []string          `json:"targets"`
	DurationNS int64             `json:"duration_ns"`
	Summary    cudaprobe.Summary `json:"summary"`
	Lost       cudaprobe.Lost    `json:"lost"`
	LostTotal  uint64            `json:"lost_total"`
	Record     string            `json:"record,omitempty"`
	Recorded   uint64            `json:"recorded"`
}

// NewCmdProbe builds `kvcanary probe` and its `cuda` subcommand.
func NewCmdProbe(f *cmdutil.Factory, runF func(*ProbeCUDAOptions) error) *cobra.Command {
	return newGroupCmd(groupHelp{
		Use:   "probe",
		Short: "Attach zero-touch probes to a running engine",
		Example: `  sudo kvcanary probe cuda --pid "$(pgrep -f sglang.launch_server | head -1)" --duration 30s
  sudo kvcanary probe cuda --lib /usr/lib/x86_64-linux-gnu/libcuda.so.1 --record cuda.kvtrace`,
	}, newCmdProbeCUDA(f, runF))
}

func newCmdProbeCUDA(f *cmdutil.Factory, runF func(*ProbeCUDAOptions) error) *cobra.Command {
	opts := &ProbeCUDAOptions{IO: f.IO, Ctx: f.Ctx, Now: f.Now, Open: openCUDAProbe}
	cmd := &cobra.Command{
		Use:   "cuda --pid PID | --lib PATH [--record FILE] [--emit ADDR] [--duration D]",
		Short: "Trace CUDA driver calls (graph capture/replay, launches, copies) with eBPF",
		Example: `  # the CUDA driver calls of one engine process for 30 s (root, or CAP_BPF and CAP_PERFMON)
  sudo kvcanary probe cuda --pid 12345 --duration 30s
  # every process using this libcuda, recorded for trace inspect
  sudo kvcanary probe cuda --lib /usr/lib/x86_64-linux-gnu/libcuda.so.1 --record cuda.kvtrace
  # feed the dashboard's CUDA panel (kvcanary watch --listen unix:///tmp/kv.sock)
  sudo kvcanary probe cuda --pid 12345 --emit unix:///tmp/kv.sock`,
		Long: `Trace CUDA driver API calls of an unmodified process with eBPF uprobes on
libcuda.so: stream capture, graph instantiate and launch, kernel launches, event
record/wait, allocations and async copies, with stream and graph-exec handles,
thread and duration.

--pid traces one process (the filter runs in the kernel) and finds its libcuda
in /proc/PID/maps; --lib traces every process using that library. Runs until
interrupted or --duration passes, then prints graph replays per second per
stream, capture windows and the streams that joined them, and ordering hints:
work captured on a side stream with no event wait back to the origin stream.
Calls the kernel could not deliver are always reported. --emit streams every
call live to a collector (kvcanary watch --listen or collect), where the
dashboard's CUDA panel shows them; calls the stream could not send are
reported at exit.

Needs Linux 5.15+ and root (or CAP_BPF and CAP_PERFMON); run "kvcanary doctor"
to check.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.PID == 0 && opts.Lib == "" {
				return cmdutil.UsageError("give --pid PID or --lib PATH")
			}
			if opts.PID < 0 {
				return cmdutil.UsageError("--pid %d: want a process id", opts.PID)
			}
			if opts.Duration < 0 {
				return cmdutil.UsageError("--duration %s: want a positive duration", opts.Duration)
			}
			return runOr(opts, runF, probeCUDARun)
		},
	}
	cmd.Flags().IntVar(&opts.PID, "pid", 0, "trace process `PID` (its libcuda is found in /proc/PID/maps)")
	cmd.Flags().StringVar(&opts.Lib, "lib", "", "probe this libcuda.so `PATH` (every process using it unless --pid)")
	cmd.Flags().StringVar(&opts.Record, "record", "", "record every call to a trace bundle `FILE` (.kvtrace); a bundle already there is kept, renamed with its time")
	cmd.Flags().StringVar(&opts.Emit, "emit", "", "also stream every call live to a collector at `ADDR` (unix:///path.sock or tcp://HOST:PORT)")
	cmd.Flags().DurationVar(&opts.Duration, "duration", 0, "stop after `D` (default: until interrupted)")
	cmd.Flags().StringVar(&opts.Run, "run", "", "run id for recorded events")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func openCUDAProbe(cfg cudaprobe.Config) (cudaProbe, error) {
	p, err := cudaprobe.Open(cfg)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func probeCUDARun(opts *ProbeCUDAOptions) error {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	cfg := cudaprobe.Config{Lib: opts.Lib}
	if opts.PID != 0 {
		// breakpoints only in that process: others using libcuda pay nothing
		cfg.PIDs, cfg.TrapOnlyPIDs = []int{opts.PID}, true
	}
	p, err := opts.Open(cfg)
	if err != nil {
		if errors.Is(err, cudaprobe.ErrNotSupported) {
			err = fmt.Errorf("%w\nhint: run `kvcanary doctor` to see what this host lacks", err)
		}
		return cmdutil.InputError(err)
	}
	defer p.Close()
	src := &probeSource{p: p, run: opts.Run}
	src.host, _ = os.Hostname()
	em, err := dialEmit(opts.Emit, opts.Run, hook.Source{Node: src.host, Proc: "cudaprobe"})
	if err != nil {
		return err
	}
	po := pipeline.Options{Sinks: []hook.Publisher{src}, Status: pipeline.NewStatusLine(opts.IO.ErrOut, opts.IO.IsStderrTTY(), now)}
	if em != nil {
		defer em.Close()
		po.Sinks = append(po.Sinks, em)
	}
	if opts.Record != "" {
		labels := map[string]string{"lib": p.Lib()}
		if opts.PID != 0 {
			labels["pid"] = strconv.Itoa(opts.PID)
		}
		po.Record, po.KeepPrevious, po.Manifest = opts.Record, true, traces.Manifest{
			Tool: "kvcanary " + buildinfo.String(), Created: now(), Run: opts.Run, Command: "probe cuda", Labels: labels,
			Host: hook.HostInfo{Hostname: src.host, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()},
		}
	}
	pl, err := pipeline.New(po)
	if err != nil {
		return cmdutil.InputError(err)
	}
	reportKept(opts.IO.ErrOut, "probe cuda", pl, opts.Record)
	ctx := orBackground(opts.Ctx)
	if opts.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
	}
	if opts.IO.IsStderrTTY() {
		fmt.Fprintf(opts.IO.ErrOut, "probing %d entry points in %s; Ctrl-C to stop\n", len(p.Targets()), cmdutil.Quote(p.Lib()))
	}
	start := now()
	res := pl.Run(ctx, src)
	if em != nil {
		writeEmitStats(opts.IO.ErrOut, "probe cuda", opts.Emit, em)
	}
	return probeCUDAReport(opts, src, res, now().Sub(start))
}

// probeCUDAReport prints the report and merges the errors.
func probeCUDAReport(opts *ProbeCUDAOptions, src *probeSource, res pipeline.Result, elapsed time.Duration) error {
	p := src.p
	src.mu.Lock()
	rep := ProbeCUDAReport{Lib: p.Lib(), PID: opts.PID, DurationNS: elapsed.Nanoseconds(), Summary: src.views.Summary(),
		Lost: src.lost, LostTotal: src.lost.Total(), Record: opts.Record, Recorded: res.Recorded}
	src.mu.Unlock()
	for _, t := range p.Targets() {
		rep.Targets = append(rep.Targets, t.Symbol)
	}
	if err := printProbeCUDA(opts, rep); err != nil {
		return err
	}
	switch {
	case res.SourceErr != nil:
		return cmdutil.InputError(res.SourceErr)
	case res.RecordErr != nil:
		return cmdutil.InputError(fmt.Errorf("record to %s: %w", opts.Record, res.RecordErr))
	case src.lostErr != nil:
		return cmdutil.InputError(src.lostErr)
	}
	return nil
}

// probeSource is the CUDA probe as a source: every traced call becomes an
// event. It is also the sink that keeps the report's views, and what the
// kernel could not deliver is the bundle's dropped count.
type probeSource struct {
	p    cudaProbe
	run  string
	host string

	mu      sync.Mutex
	views   cudaprobe.Views
	lost    cudaprobe.Lost
	lostErr error
}

func (s *probeSource) Run(ctx context.Context, pub hook.Publisher) error {
	err := s.p.Run(ctx, func(c hook.CUDA) {
		pub.Publish(cudaprobe.Event(c, hook.Source{Node: s.host, Proc: "cudaprobe"}, s.run))
	})
	lost, lostErr := s.p.Lost()
	s.mu.Lock()
	s.lost, s.lostErr = lost, lostErr
	s.mu.Unlock()
	return err
}

// Publish adds a traced call to the views.
func (s *probeSource) Publish(ev hook.Event) {
	if c, ok := ev.Body.(*hook.CUDA); ok {
		s.mu.Lock()
		s.views.Add(c)
		s.mu.Unlock()
	}
}

// Lost is the calls the kernel could not deliver.
func (s *probeSource) Lost() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost.Total()
}

// Status is the status line: calls, graph launches, captures, hints.
func (s *probeSource) Status() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := s.views.Summary()
	return fmt.Sprintf("%d calls, %d graph launches, %d captures, %d hints", sum.Events, sum.Calls["cuGraphLaunch"], len(sum.Captures), sum.HintsTotal)
}

// writeProbeTables prints graph replays per stream and the capture windows.
func writeProbeTables(out io.Writer, s cudaprobe.Summary) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if len(s.Replays) > 0 {
		fmt.Fprintln(out, "graph replays:")
		fmt.Fprintln(tw, "  PID\tSTREAM\tREPLAYS\tPER SEC\tEXECS")
		for _, x := range s.Replays {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%.1f\t%d\n", x.PID, x.Stream, x.Replays, x.PerSec, x.Execs)
		}
		tw.Flush()
	}
	if len(s.Captures) > 0 {
		fmt.Fprintln(out, "captures:")
		fmt.Fprintln(tw, "  PID\tORIGIN\tDUR ms\tGRAPH\tEXECS\tJOINED\tLAUNCHES\tSIDE\tREPLAYS")
		for _, c := range s.Captures {
			dur := "open"
			if !c.Open {
				dur = fmt.Sprintf("%.3f", float64(c.EndNS-c.StartNS)/1e6)
			}
			joined := make([]string, len(c.Joined))
			for i, j := range c.Joined {
				joined[i] = j.String()
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\n", c.PID, c.Origin, dur, c.Graph, len(c.Execs),
				gpuDash(strings.Join(joined, ",")), c.Launches, c.SideLaunches, c.Replays)
		}
		tw.Flush()
		if s.CapturesDropped > 0 {
			fmt.Fprintf(out, "  (%d more captures not kept)\n", s.CapturesDropped)
		}
	}
}

func printProbeCUDA(opts *ProbeCUDAOptions, r ProbeCUDAReport) error {
	if opts.JSON.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, r)
	}
	out := opts.IO.Out
	s := r.Summary
	pid := ""
	if r.PID != 0 {
		pid = fmt.Sprintf(", pid %d", r.PID)
	}
	fmt.Fprintf(out, "probed %s (%d entry points)%s for %.1fs\n", cmdutil.Quote(r.Lib), len(r.Targets), pid, float64(r.DurationNS)/1e9)
	names := keysByCount(s.Calls)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, s.Calls[k])
	}
	fmt.Fprintf(out, "calls: %d", s.Events)
	if len(parts) > 0 {
		fmt.Fprintf(out, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintln(out)

	writeProbeTables(out, s)
	if s.HintsTotal > 0 {
		fmt.Fprintf(out, "ordering hints (%d): side-stream work captured with no event wait back to the origin stream\n", s.HintsTotal)
		for _, h := range s.Hints {
			fmt.Fprintf(out, "  %s\n", h.String())
		}
		if s.HintsTotal > len(s.Hints) {
			fmt.Fprintf(out, "  (%d more)\n", s.HintsTotal-len(s.Hints))
		}
	}
	l := r.Lost
	fmt.Fprintf(out, "lost: %d (ring buffer full %d, entry table full %d, return without entry %d, malformed %d)\n",
		r.LostTotal, l.RingFull, l.InflightFull, l.NoEntry, l.Malformed)
	if r.Record != "" {
		fmt.Fprintf(out, "recorded %d events to %s\n", r.Recorded, cmdutil.Quote(r.Record))
	}
	return nil
}
