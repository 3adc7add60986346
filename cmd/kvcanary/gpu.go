package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/gpu"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// GPUOptions are the inputs of `kvcanary gpu`.
type GPUOptions struct {
	IO    *cmdutil.IOStreams
	JSON  *cmdutil.JSONFlags
	Ctx   context.Context
	Now   func() time.Time
	Watch time.Duration // 0: one sample
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
  kvcanary gpu --json | jq '.devices[].mem_used'`,
		Long: `Show one NVML sample of every GPU: memory used/total, utilization, temperature,
power, clocks, volatile ECC counts, PCIe replays, retired pages and remapped rows,
and the compute processes with their device memory. With --watch, sample every
interval until interrupted, with the last Xid critical error of each device.

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
