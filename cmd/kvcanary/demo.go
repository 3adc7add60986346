package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/demo"
	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/pipeline"
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
	Keep     bool // keep the bundles of a temporary directory (no --out)
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

Every run is recorded to a bundle. With --out DIR (or --keep) the bundles
stay, and the demo prints the commands that re-check each step (kvcanary
checksum compare, canary report, graphdiff report and ab); without either
they go to a temporary directory that is removed at the end.`,
		Example: `  kvcanary demo
  kvcanary demo --sessions 40 --rounds 4 --seed 2 --out demo-bundles
  kvcanary demo --keep
  kvcanary demo --json | jq .verdict`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Sessions < 1 || opts.Rounds < 1 {
				return cmdutil.UsageError("--sessions and --rounds must be at least 1")
			}
			return runOr(opts, runF, demoRun)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Sessions, "sessions", 80, "sessions per run, all in flight at once on the twin")
	fl.IntVar(&opts.Rounds, "rounds", 4, "most rounds per session")
	fl.Uint64Var(&opts.Seed, "seed", 1, "seed of the twin's workload, rooms and stream interleaving")
	fl.StringVar(&opts.Out, "out", "", "directory for the runs' bundles, kept (default: a temporary directory, removed at the end unless --keep)")
	fl.BoolVar(&opts.Keep, "keep", false, "keep the temporary directory of bundles and print how to re-check each step")
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
	line := pipeline.NewStatusLine(opts.IO.ErrOut, opts.IO.IsStderrTTY(), opts.Factory.Now)
	if plain {
		fmt.Fprintf(out, "kvcanary demo: the seeds' investigation on the twin (%d sessions × %d rounds, seed %d)\n\n", opts.Sessions, opts.Rounds, opts.Seed)
	}
	rep, err := demo.Run(opts.Factory.Ctx, demo.Options{Sessions: opts.Sessions, Rounds: opts.Rounds, Seed: opts.Seed, Out: opts.Out,
		Parallel: opts.Parallel, Tool: "kvcanary " + buildinfo.String(), Pictures: true, Now: opts.Factory.Now,
		BundlesRemoved: opts.Out == "" && !opts.Keep, // as demoBundlesDone does: report.html must not name them
		Publish: func(u demo.Update) {
			switch {
			case u.State == "running" && u.Total > 0:
				line.Set(fmt.Sprintf("%d. %s: %d/%d sessions", u.Index, u.Step, u.Finished, u.Total))
			case u.State == "done":
				line.Clear()
				if plain {
					writeDemoStep(out, u.Index, u.Result)
				}
			}
		}})
	if err != nil {
		w := io.Discard
		if plain {
			w = out
		}
		demoBundlesDone(opts, rep, w)
		return err
	}
	if opts.JSON.JSON {
		demoBundlesDone(opts, rep, io.Discard)
		return cmdutil.WriteJSON(out, rep)
	}
	demoBundlesDone(opts, rep, out)
	_, err = fmt.Fprintf(out, "wall: %.1fs\n", rep.WallSeconds)
	return err
}

func writeDemoStep(w io.Writer, idx int, r *demo.StepResult) {
	if r.Step == demo.StepVerdict {
		// A sentence (or workaround) a line, under the label.
		lines := r.Lines
		if len(lines) == 0 {
			lines = []string{r.Result}
		}
		fmt.Fprintf(w, "\nVERDICT: %s\n", strings.Join(lines, "\n         "))
		return
	}
	fmt.Fprintf(w, "%d. %s\n   %s\n", idx, r.Title, strings.ReplaceAll(r.Result, "\n", "\n   "))
}

// demoBundlesDone settles the runs' bundles once the demo ends. A temporary
// directory (no --out) is removed unless --keep, and the report's paths are
// cleared so nothing points at files that are gone; kept bundles are listed
// by name with the commands that re-check each step.
func demoBundlesDone(opts *DemoOptions, rep *demo.Report, w io.Writer) {
	if rep == nil || rep.Out == "" {
		return
	}
	if opts.Out == "" && !opts.Keep {
		demoKeepPictures(opts, rep)
		if err := os.RemoveAll(rep.Out); err != nil {
			fmt.Fprintf(opts.IO.ErrOut, "demo: remove the temporary bundles: %s\n", cmdutil.Quote(err.Error()))
			return
		}
		rep.Out = ""
		for i := range rep.Steps {
			rep.Steps[i].Bundle = ""
		}
		for i := range rep.Evidence.Toggles {
			rep.Evidence.Toggles[i].Bundle = ""
		}
		fmt.Fprintln(w, "\nbundles: removed (a temporary directory); --out DIR or --keep keeps them to re-check each step")
		demoPicturesLine(w, rep)
		return
	}
	fmt.Fprint(w, demoRecheck(rep))
	demoPicturesLine(w, rep)
}

// demoKeepPictures moves the report and the timeline out of the temporary
// bundle directory into StateDir("demo") before it is removed: they are
// small, and the point of a run is to look at them.
func demoKeepPictures(opts *DemoOptions, rep *demo.Report) {
	pics := &rep.Pictures
	if pics.Report == "" && pics.Timeline == "" {
		return
	}
	dir, err := tui.StateDir("demo")
	if err == nil {
		err = os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		fmt.Fprintf(opts.IO.ErrOut, "demo: keep the pictures: %s\n", cmdutil.Quote(err.Error()))
		*pics = demo.Pictures{}
		return
	}
	for _, p := range []*string{&pics.Report, &pics.Timeline} {
		if *p == "" {
			continue
		}
		dst := filepath.Join(dir, filepath.Base(*p))
		if err := moveFile(*p, dst); err != nil {
			fmt.Fprintf(opts.IO.ErrOut, "demo: keep %s: %s\n", filepath.Base(*p), cmdutil.Quote(err.Error()))
			*p = ""
			continue
		}
		*p = dst
	}
}

// moveFile renames src to dst, copying across file systems.
func moveFile(src, dst string) error {
	if err := os.Rename(src, dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// demoPicturesLine says where the report and the timeline are.
func demoPicturesLine(w io.Writer, rep *demo.Report) {
	if p := rep.Pictures; p.Report != "" {
		fmt.Fprintf(w, "pictures: %s (open in a browser)", p.Report)
		if p.Timeline != "" {
			fmt.Fprintf(w, ", %s (open at https://ui.perfetto.dev)", p.Timeline)
		}
		fmt.Fprintln(w)
	}
}

// demoRecheck lists the bundles kept and the command that re-checks each step,
// one a line, with the paths a shell takes as they are.
func demoRecheck(rep *demo.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nbundles: %s\n", rep.Out)
	base := ""
	for _, s := range rep.Steps {
		if s.Step == demo.StepBaseline {
			base = s.Bundle
		}
	}
	if base == "" {
		return b.String()
	}
	q := shellArg
	b.WriteString("re-check:\n")
	fmt.Fprintf(&b, "  kvcanary checksum compare %s   # 2. transfer\n", q(base))
	fmt.Fprintf(&b, "  kvcanary canary report %s      # 3. buffer\n", q(base))
	fmt.Fprintf(&b, "  kvcanary graphdiff report %s   # 4. compute\n", q(base))
	for _, t := range rep.Evidence.Toggles {
		if t.Bundle != "" {
			fmt.Fprintf(&b, "  kvcanary ab %s %s   # A/B %s\n", q(base), q(t.Bundle), t.Toggle)
		}
	}
	return b.String()
}

// shellArg is s as one shell word: as it is when it holds only characters no
// shell treats specially, else in single quotes.
func shellArg(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./-:+,=@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
