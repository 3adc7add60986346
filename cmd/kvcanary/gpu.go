package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/gpu"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// GPUOptions are the inputs of `kvcanary gpu`.
type GPUOptions struct {
	IO    *cmdutil.IOStreams
	JSON  *cmdutil.JSONFlags
	Ctx   context.Context
	Now   func() time.Time
	Watch time.Duration // 0: one sample (or every second with --emit/--record)
	// Emit streams the samples to a collector; Record writes them to a
	// bundle. Either keeps sampling until interrupted.
	Emit   string
	Record string
	Run    string
	// Open loads NVML; tests inject a fake.
	Open func() (gpu.Lib, error)
}

// GPUReport is the --json shape of one `kvcanary gpu` sample.
type GPUReport struct {
	TS      int64               `json:"ts_ns"`
	Driver  string              `json:"driver,omitempty"`
	CUDA    string              `json:"cuda,omitempty"`
	Devices []hook.GPUDevice    `json:"devices"`
	Skipped map[string][]string `json:"skipped,omitempty"` // device index → metrics NVML could not give
}

// NewCmdGPU builds `kvcanary gpu`.
func NewCmdGPU(f *cmdutil.Factory, runF func(*GPUOptions) error) *cobra.Command {
	opts := &GPUOptions{IO: f.IO, Ctx: f.Ctx, Now: f.Now, Open: gpu.Open}
	cmd := &cobra.Command{
		Use:   "gpu",
		Short: "Show NVIDIA GPU telemetry (NVML): memory, utilization, ECC, Xid",
		Example: `  kvcanary gpu
  kvcanary gpu --watch 1s
  kvcanary gpu --json | jq '.devices[].mem_used'
  # feed the dashboard's GPU panel (kvcanary watch --listen unix:///tmp/kv.sock)
  kvcanary gpu --emit unix:///tmp/kv.sock
  kvcanary gpu --record gpu.kvtrace --watch 5s`,
		Long: `Show one NVML sample of every GPU: memory used/total, utilization, temperature,
power, clocks, volatile ECC counts, PCIe replays, retired pages and remapped rows,
and the compute processes with their device memory. With --watch, sample every
interval until interrupted, with the last Xid critical error of each device.

--emit streams the samples to a collector (kvcanary watch --listen or collect),
where the dashboard's GPU panel shows them; --record writes them to a trace
bundle. Both sample every --watch interval (default 1s) until interrupted, and
print the samples only when --watch is given; what the stream sent and dropped
is reported at exit.

On a host without an NVIDIA driver it exits 3; run "kvcanary doctor" to see
what the host lacks.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Watch < 0 {
				return cmdutil.UsageError("--watch %s: want a positive interval", opts.Watch)
			}
			return runOr(opts, runF, gpuRun)
		},
	}
	cmd.Flags().DurationVar(&opts.Watch, "watch", 0, "sample every `INTERVAL` (e.g. 1s) until interrupted")
	cmd.Flags().StringVar(&opts.Emit, "emit", "", "stream the samples live to a collector at `ADDR` (unix:///path.sock or tcp://HOST:PORT)")
	cmd.Flags().StringVar(&opts.Record, "record", "", "record the samples to a trace bundle `FILE` (.kvtrace); a bundle already there is kept, renamed with its time")
	cmd.Flags().StringVar(&opts.Run, "run", "", "run `ID` for emitted and recorded samples (default: the collector's)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func gpuRun(opts *GPUOptions) error {
	lib, err := opts.Open()
	if err != nil {
		if errors.Is(err, gpu.ErrNoGPU) || errors.Is(err, gpu.ErrNotSupported) {
			return cmdutil.InputError(fmt.Errorf("%w\nhint: run `kvcanary doctor` to see what this host lacks", err))
		}
		return cmdutil.InputError(err)
	}
	defer lib.Close()
	ctx := orBackground(opts.Ctx)
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if opts.Emit != "" || opts.Record != "" {
		return gpuFeed(ctx, opts, lib, now)
	}
	if opts.Watch == 0 {
		s, err := gpu.Collect(lib, now())
		if err != nil {
			return cmdutil.InputError(err)
		}
		return printGPU(opts, gpuReport(s))
	}
	var printErr error
	smp := &gpu.Sampler{Lib: lib, Interval: opts.Watch, Now: now}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = smp.Run(ctx, hook.PublishFunc(func(ev hook.Event) {
		b := ev.Body.(*hook.GPU)
		r := GPUReport{TS: ev.TS, Driver: b.Driver, CUDA: gpu.CUDAVersion(b.CUDA), Devices: b.Devices}
		if err := printGPU(opts, r); err != nil && printErr == nil {
			printErr = err
			cancel()
		}
	}))
	if err != nil {
		return cmdutil.InputError(err)
	}
	return printErr
}

// gpuFeed is --emit and --record: the sampler as a pipeline source whose
// sinks are the emitter, the bundle and (with --watch) the printer.
func gpuFeed(ctx context.Context, opts *GPUOptions, lib gpu.Lib, now func() time.Time) error {
	host, _ := os.Hostname()
	src := &gpuSource{smp: &gpu.Sampler{Lib: lib, Interval: opts.Watch, Now: now, Src: hook.Source{Node: host, Proc: "gpu"}}}
	em, err := dialEmit(opts.Emit, opts.Run, src.smp.Src)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var printErr error
	po := pipeline.Options{StampRun: opts.Run}
	if opts.Watch == 0 {
		// Quiet sampling: a status line says how many went out. With --watch
		// the samples themselves are printed, and a redrawn line would
		// garble them on the terminal.
		po.Status, po.StatusLabel = pipeline.NewStatusLine(opts.IO.ErrOut, opts.IO.IsStderrTTY(), now), "gpu: "
	}
	if em != nil {
		po.Sinks = append(po.Sinks, em)
	}
	if opts.Watch > 0 {
		po.Sinks = append(po.Sinks, hook.PublishFunc(func(ev hook.Event) {
			b, ok := ev.Body.(*hook.GPU)
			if !ok || printErr != nil {
				return
			}
			r := GPUReport{TS: ev.TS, Driver: b.Driver, CUDA: gpu.CUDAVersion(b.CUDA), Devices: b.Devices}
			if printErr = printGPU(opts, r); printErr != nil {
				cancel()
			}
		}))
	}
	if opts.Record != "" {
		po.Record, po.KeepPrevious, po.Manifest = opts.Record, true, traces.Manifest{
			Tool: "kvcanary " + buildinfo.String(), Created: now(), Run: opts.Run, Command: "gpu",
			Host: hook.HostInfo{Hostname: host, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()},
		}
	}
	pl, err := pipeline.New(po)
	if err != nil {
		if em != nil {
			em.Close()
		}
		return cmdutil.InputError(err)
	}
	reportKept(opts.IO.ErrOut, "gpu", pl, opts.Record)
	if opts.IO.IsStderrTTY() {
		fmt.Fprintf(opts.IO.ErrOut, "gpu: sampling every %s%s%s; Ctrl-C to stop\n", src.interval(), emitNote(opts.Emit), recordNote(opts.Record))
	}
	res := pl.Run(ctx, src)
	if em != nil {
		writeEmitStats(opts.IO.ErrOut, "gpu", opts.Emit, em)
	}
	if opts.Record != "" {
		fmt.Fprintf(opts.IO.ErrOut, "gpu: recorded %d events to %s\n", res.Recorded, cmdutil.Quote(opts.Record))
	}
	switch {
	case res.SourceErr != nil:
		return cmdutil.InputError(res.SourceErr)
	case res.RecordErr != nil:
		return cmdutil.InputError(fmt.Errorf("record to %s: %w", opts.Record, res.RecordErr))
	}
	return printErr
}

func emitNote(addr string) string {
	if addr == "" {
		return ""
	}
	return ", streaming to " + cmdutil.Quote(addr)
}

// gpuSource is the NVML sampler as a pipeline source that counts its samples.
type gpuSource struct {
	smp     *gpu.Sampler
	samples atomic.Uint64
}

func (s *gpuSource) interval() time.Duration {
	if s.smp.Interval > 0 {
		return s.smp.Interval
	}
	return time.Second
}

func (s *gpuSource) Run(ctx context.Context, pub hook.Publisher) error {
	return s.smp.Run(ctx, hook.PublishFunc(func(ev hook.Event) {
		s.samples.Add(1)
		pub.Publish(ev)
	}))
}

// Status is the status line: "12 samples".
func (s *gpuSource) Status() string { return fmt.Sprintf("%d samples", s.samples.Load()) }

func gpuReport(s *gpu.Sample) GPUReport {
	r := GPUReport{TS: s.At.UnixNano(), Driver: s.Driver, CUDA: gpu.CUDAVersion(s.CUDA), Devices: s.Devices}
	if r.Devices == nil {
		r.Devices = []hook.GPUDevice{}
	}
	if len(s.Skipped) > 0 {
		r.Skipped = map[string][]string{}
		for i, m := range s.Skipped {
			r.Skipped[strconv.Itoa(i)] = m
		}
	}
	return r
}

func printGPU(opts *GPUOptions, r GPUReport) error {
	if opts.JSON.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, r)
	}
	w := opts.IO.Out
	if opts.IO.IsStdoutTTY() {
		return gpuTable(w, r)
	}
	return gpuLines(w, r)
}

func gpuGiB(b uint64) string { return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) }

func gpuXidText(x uint64) string {
	if x == 0 {
		return "-"
	}
	return strconv.FormatUint(x, 10)
}

func gpuTable(out io.Writer, r GPUReport) error {
	fmt.Fprintf(out, "driver %s  CUDA %s  %d GPU(s)  %s\n", gpuDash(r.Driver), gpuDash(r.CUDA), len(r.Devices),
		time.Unix(0, r.TS).UTC().Format(time.RFC3339))
	rows := [][]string{{"GPU", "NAME", "MEM GiB", "UTIL", "MEMUTIL", "TEMP", "POWER W", "SM/MEM MHz", "ECC SBE/DBE", "PCIE REPLAY", "RETIRED", "REMAP C/U", "XID", "PROCS"}}
	for _, d := range r.Devices {
		remap := fmt.Sprintf("%d/%d", d.RemappedCorr, d.RemappedUnc)
		if d.RemapPending {
			remap += " pending"
		}
		rows = append(rows, []string{strconv.Itoa(d.Index), cmdutil.Quote(d.Name), gpuGiB(d.MemUsed) + "/" + gpuGiB(d.MemTotal),
			fmt.Sprintf("%d%%", d.UtilGPU), fmt.Sprintf("%d%%", d.UtilMem), fmt.Sprintf("%dC", d.TempC),
			fmt.Sprintf("%.1f", float64(d.PowerMW)/1000), fmt.Sprintf("%d/%d", d.SMClockMHz, d.MemClockMHz),
			fmt.Sprintf("%d/%d", d.ECCSBE, d.ECCDBE), fmt.Sprint(d.PCIeReplay), fmt.Sprint(d.RetiredPages), remap,
			gpuXidText(d.Xid), strconv.Itoa(len(d.Procs))})
	}
	if err := cmdutil.WriteTable(out, true, rows); err != nil {
		return err
	}
	for _, d := range r.Devices {
		for _, p := range d.Procs {
			fmt.Fprintf(out, "  GPU %d  pid %d  %s GiB\n", d.Index, p.PID, gpuGiB(p.MemUsed))
		}
	}
	return writeSkipped(out, r)
}

func gpuLines(out io.Writer, r GPUReport) error {
	for _, d := range r.Devices {
		procs := make([]string, len(d.Procs))
		for i, p := range d.Procs {
			procs[i] = fmt.Sprintf("%d:%d", p.PID, p.MemUsed)
		}
		fmt.Fprintf(out, "gpu=%d name=%q uuid=%s mem_used=%d mem_total=%d util=%d mem_util=%d temp_c=%d power_mw=%d sm_mhz=%d mem_mhz=%d ecc_sbe=%d ecc_dbe=%d pcie_replay=%d retired=%d remapped_corr=%d remapped_unc=%d remap_pending=%t xid=%d procs=%s\n",
			d.Index, d.Name, gpuDash(d.UUID), d.MemUsed, d.MemTotal, d.UtilGPU, d.UtilMem, d.TempC, d.PowerMW,
			d.SMClockMHz, d.MemClockMHz, d.ECCSBE, d.ECCDBE, d.PCIeReplay, d.RetiredPages,
			d.RemappedCorr, d.RemappedUnc, d.RemapPending, d.Xid, gpuDash(strings.Join(procs, ",")))
	}
	return writeSkipped(out, r)
}

func writeSkipped(out io.Writer, r GPUReport) error {
	keys := make([]string, 0, len(r.Skipped))
	for k := range r.Skipped {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, _ := strconv.Atoi(keys[i])
		b, _ := strconv.Atoi(keys[j])
		return a < b
	})
	for _, k := range keys {
		if _, err := fmt.Fprintf(out, "GPU %s: unavailable: %s\n", k, strings.Join(r.Skipped[k], ", ")); err != nil {
			return err
		}
	}
	return nil
}

func gpuDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
