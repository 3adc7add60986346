package main

import (
	"context"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/cmd/kvcanary/internal/doctor"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// The doctor's report types, whose JSON is the --json output; the checks
// live in internal/doctor.
type (
	DoctorCheck  = doctor.Check
	DoctorReport = doctor.Report
	DoctorEnv    = doctor.Env
	SGLangCheck  = doctor.SGLangCheck
	SGLangTarget = doctor.SGLangTarget
)

// DoctorOptions are the inputs of `kvcanary doctor`.
type DoctorOptions struct {
	IO      *cmdutil.IOStreams
	JSON    *cmdutil.JSONFlags
	Ctx     context.Context
	Socket  string
	Python  string // --python: the engine's interpreter
	Require []string
	Env     DoctorEnv
}

// NewCmdDoctor builds `kvcanary doctor`.
func NewCmdDoctor(f *cmdutil.Factory, runF func(*DoctorOptions) error) *cobra.Command {
	opts := &DoctorOptions{IO: f.IO, Ctx: f.Ctx, Env: doctor.SystemEnv()}
	cmd := &cobra.Command{
		Use:   "doctor [--socket ADDR] [--require GROUP,...]",
		Short: "Check what this host offers kvcanary: GPU, eBPF, libcuda, collector, engines",
		Example: `  kvcanary doctor
  kvcanary doctor --require gpu,ebpf --json
  kvcanary doctor --socket unix:///tmp/kvcanary.sock --python /opt/sglang/bin/python`,
		Long: `Check, on one screen, what this host offers kvcanary's live sources:

  gpu      NVML found (libnvidia-ml.so.1), devices, driver and CUDA versions
  ebpf     privileges (root or CAP_BPF and CAP_PERFMON), kernel version, BTF,
           uprobe support — what "kvcanary probe cuda" needs
  libcuda  where libcuda.so.1 is (linker cache, common paths)
  socket   the collector socket given with --socket is reachable
  engine   SGLang / vLLM processes running, and whether they map libcuda
  sglang   the engine's Python imports sglang, and kvcanary's hook targets
           resolve in it (python3 -m kvcanary.sglang check, with the package
           this binary carries on PYTHONPATH); the interpreter is --python,
           else $KVCANARY_PYTHON, else python3 on PATH

Each line is ok, warn, fail or skip, with what to do when it is not ok.

Exit status: 0 unless a check you asked for fails — the socket check when
--socket is given, and every group named in --require (a warn or a skip
counts as a failure there) — then 1.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, g := range opts.Require {
				if !slices.Contains(doctor.Groups, g) {
					return cmdutil.UsageError("--require %q: want one of %s", g, strings.Join(doctor.Groups, ", "))
				}
			}
			return runOr(opts, runF, doctorRun)
		},
	}
	cmd.Flags().StringVar(&opts.Socket, "socket", "", "check the collector at `ADDR` (unix:///path.sock, a socket path, or tcp://host:port)")
	cmd.Flags().StringVar(&opts.Python, "python", "", "the engine's Python interpreter `PATH` for the sglang checks (default $KVCANARY_PYTHON, else python3 on PATH)")
	cmd.Flags().StringSliceVar(&opts.Require, "require", nil, "exit 1 unless these `GROUPS` pass: "+strings.Join(doctor.Groups, ","))
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func doctorRun(opts *DoctorOptions) error {
	ctx := orBackground(opts.Ctx)
	rep := doctor.NewReport(doctor.Checks(ctx, opts.Env, opts.Socket, opts.Python), opts.Require, opts.Socket)
	if err := writeJSONOr(opts.IO.Out, opts.JSON.JSON, rep, func() error { return doctor.WriteText(opts.IO.Out, rep) }); err != nil {
		return err
	}
	if len(rep.Failed) > 0 {
		return cmdutil.FindingError
	}
	return nil
}
