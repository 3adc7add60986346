package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/demo"
	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/tui"
)

// DemoOptions are the inputs of `kvcanary demo`.
type DemoOptions struct {
	IO       *cmdutil.IOStreams
	Factory  *cmdutil.Factory
	JSON     *cmdutil.JSONFlags
	Sessions int
	Rounds   int
	Seed     uint64
	Out      string
	Parallel int
	Plain    bool // print step lines even on a terminal (no dashboard)

	// runTUI shows the dashboard (tests replace it); default tui.Run.
	runTUI func(context.Context, tui.Options) (tui.Stats, error)
}

// NewCmdDemo builds `kvcanary demo`.
func NewCmdDemo(f *cmdutil.Factory, runF func(*DemoOptions) error) *cobra.Command {
	opts := &DemoOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the seeds' investigation on the twin, step by step, to its verdict",
		Long: `Run the seeds' whole investigation on the embedded twin, in order, each step
printing its decisive result:

  1. baseline corruption (bf16 index-K, captured decode, multi-stream overlap, PD)
  2. transfer: per-room index-K checksums, prefill vs decode
  3. buffer: canary around every graph replay (live-page overwrites)
  4. compute: graph replay vs eager on the same inputs
  5–8. A/B: --index-k-dtype fp8, --disable-cuda-graph, --cuda-graph-max-bs 64,
     --multi-stream-overlap=false — each against the baseline with Fisher's
     exact p and the confounds
  9. the verdict, derived from the evidence above

Every run is recorded to a bundle in --out (default: a new temporary
directory), so each step can be re-checked with kvcanary checksum compare,
canary report, graphdiff report and ab.`,
		Example: `  kvcanary demo
  kvcanary demo --sessions 40 --rounds 4 --seed 2 --out demo-bundles
  kvcanary demo --json | jq .verdict`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Sessions < 1 || opts.Rounds < 1 {
				return cmdutil.UsageError("--sessions and --rounds must be at least 1")
			}
			if runF != nil {
				return runF(opts)
			}
			return demoRun(opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Sessions, "sessions", 80, "sessions per run, all in flight at once on the twin")
	fl.IntVar(&opts.Rounds, "rounds", 4, "most rounds per session")
	fl.Uint64Var(&opts.Seed, "seed", 1, "seed of the twin's workload, rooms and stream interleaving")
	fl.StringVar(&opts.Out, "out", "", "directory for the runs' bundles (default: a new temporary directory)")
	fl.IntVar(&opts.Parallel, "parallel", 0, "twin runs at once (default: min(2, cores))")
	fl.BoolVar(&opts.Plain, "plain", false, "print the steps as plain lines even when stdout is a terminal (default there: the live dashboard)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func demoRun(opts *DemoOptions) error {
	if !opts.JSON.JSON && !opts.Plain && opts.IO.IsStdoutTTY() {
		return demoTUIRun(opts, opts.runTUI)
	}
	out := opts.IO.Out
	plain := !opts.JSON.JSON
	tty := opts.IO.IsStderrTTY()
	if plain {
		fmt.Fprintf(out, "kvcanary demo: the seeds' investigation on the twin (%d sessions × %d rounds, seed %d)\n\n", opts.Sessions, opts.Rounds, opts.Seed)
	}
	rep, err := demo.Run(opts.Factory.Ctx, demo.Options{Sessions: opts.Sessions, Rounds: opts.Rounds, Seed: opts.Seed, Out: opts.Out,
		Parallel: opts.Parallel, Tool: "kvcanary " + buildinfo.String(),
		Publish: func(u demo.Update) {
			if u.State == "running" && tty {
				if u.Total > 0 {
					fmt.Fprintf(opts.IO.ErrOut, "\r\033[K%d. %s: %d/%d sessions", u.Index, u.Step, u.Finished, u.Total)
				}
				return
			}
			if u.State != "done" {
				return
			}
			if tty {
				fmt.Fprint(opts.IO.ErrOut, "\r\033[K")
			}
			if plain {
				writeDemoStep(out, u.Index, u.Result)
			}
		}})
	if err != nil {
		if rep != nil && plain && rep.Out != "" {
			fmt.Fprintf(out, "\nbundles so far: %s\n", rep.Out)
		}
		return err
	}
	if opts.JSON.JSON {
		return cmdutil.WriteJSON(out, rep)
	}
	fmt.Fprintf(out, "\nbundles: %s\n", rep.Out)
	fmt.Fprintf(out, "  re-check: kvcanary checksum compare %[1]s/baseline.kvtrace; kvcanary canary report %[1]s/baseline.kvtrace; kvcanary graphdiff report %[1]s/baseline.kvtrace; kvcanary ab %[1]s/baseline.kvtrace %[1]s/ab4-*.kvtrace\n", rep.Out)
	_, err = fmt.Fprintf(out, "wall: %.1fs\n", rep.WallSeconds)
	return err
}

func writeDemoStep(w io.Writer, idx int, r *demo.StepResult) {
	if r.Step == demo.StepVerdict {
		fmt.Fprintf(w, "\nVERDICT: %s\n", r.Result)
		return
	}
	fmt.Fprintf(w, "%d. %s\n   %s\n", idx, r.Title, strings.ReplaceAll(r.Result, "\n", "\n   "))
}
