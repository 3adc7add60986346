package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/sessions"
)

// ABOptions are the inputs of `kvcanary ab`.
type ABOptions struct {
	IO   *cmdutil.IOStreams
	Ctx  context.Context // cancels opening and reading the inputs (SIGINT, SIGTERM)
	JSON *cmdutil.JSONFlags

	PathA, PathB string
	Flag         string // engine flag under test; "" infers it
}

// NewCmdAB builds `kvcanary ab A.kvtrace B.kvtrace`.
func NewCmdAB(f *cmdutil.Factory, runF func(*ABOptions) error) *cobra.Command {
	opts := &ABOptions{IO: f.IO, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "ab A.kvtrace B.kvtrace",
		Short: "Compare two runs: corruption rates, Fisher's exact test, and confounds",
		Long: `Compare two recorded runs (trace bundles of repro or sim run --record).

For each run: sessions per outcome class with rates and 95% Wilson intervals.
Between them: the two-sided Fisher exact p for corrupted (leak, no_tool, error)
vs not, and the confounds that make the comparison unfair — every way the runs
differ besides the engine flag under test: rounds, sessions, concurrency,
model, engine, other engine flags, peak running requests (more than 20% apart),
peak token usage, retractions, GPU count and model, host, tool version.

The flag under test is the one engine flag that differs; when several differ,
name it with --flag (index_k_dtype, cuda_graph, cuda_graph_max_bs,
multi_stream_overlap, disaggregation, max_running_requests, pool_tokens, tp_size, inject,
extra.<name>, server.<arg>) and the others are listed as confounds.

Only settings both runs know are compared: reported by the server (repro asks
SGLang's /get_server_info; its other args are server.<arg>, minus addresses,
paths, seeds and live state), reported by the engine from inside (wrap's
hooks: multi_stream_overlap, cuda_graph, index_k_dtype, tp_size, …), labelled
(repro --label, wrap --config), or the twin's own. A label the engine
contradicts is listed in the notes with both values; the engine's is used. A setting one run does not know is not a difference; the notes
name it and where the other run's value came from.

Correlations are reported honestly: retractions in a run with no corruption are
called out as non-causal evidence, and corruption in a run without retractions
rules retraction out as its cause there.

No data: when a run has no session events (a bundle recorded without the
session layer, or one whose damage lost them all) there is nothing to compare:
the verdict says so, --json carries "status": "no-data" and "message", and the
exit code is 4.

Partial: when a run's bundle lost events (damaged frames skipped, a footer
counting more events than were readable, a bundle cut short, events dropped
before the writer), sessions may be missing from its counts: the report names
the run, how many events were unreadable, in a line starting "PARTIAL:", the
verdict says so, --json carries "status": "partial" and "partial": [reasons],
and the exit code is 4 whatever the comparison shows. A significant difference
over partial data is still partial: the missing sessions could change it.

ab is a report, not a check: it exits 0 whatever a comparison over complete
runs shows, 4 on no data or partial data, 3 when a bundle cannot be read, 2 on
usage errors.`,
		Example: `  kvcanary ab baseline.kvtrace fp8.kvtrace
  kvcanary ab base.kvtrace no-overlap.kvtrace --flag multi_stream_overlap --json | jq .fisher_p`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.PathA, opts.PathB = args[0], args[1]
			if opts.Flag != "" && !sessions.IsEngineFlag(opts.Flag) {
				return cmdutil.UsageError("--flag %s: not an engine flag (want one of %s, extra.<name> or server.<arg>)",
					cmdutil.Quote(opts.Flag), strings.Join(sessions.EngineFlags, ", "))
			}
			return runOr(opts, runF, abRun)
		},
	}
	cmd.Flags().StringVar(&opts.Flag, "flag", "", "engine flag under test (default: the one that differs)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func abRun(opts *ABOptions) error {
	ctx := orBackground(opts.Ctx)
	a, err := runStatsFromBundleCtx(ctx, opts.PathA)
	if err != nil {
		return cmdutil.InputError(err)
	}
	b, err := runStatsFromBundleCtx(ctx, opts.PathB)
	if err != nil {
		return cmdutil.InputError(err)
	}
	for _, r := range []*sessions.RunStats{a, b} {
		warnRun(opts.IO.ErrOut, r)
	}
	rep := sessions.Compare(a, b, sessions.CompareOptions{Flag: opts.Flag})
	if err := writeJSONOr(opts.IO.Out, opts.JSON.JSON, rep, func() error { return rep.WriteText(opts.IO.Out) }); err != nil {
		return err
	}
	if rep.Status != "" { // no data, or partial: a verdict over what was not all there
		return PartialError
	}
	return nil
}

func warnRun(w io.Writer, r *sessions.RunStats) {
	if r.Truncated {
		fmt.Fprintf(w, "warning: %s: bundle is truncated; counts cover what was recorded\n", cmdutil.Quote(r.Name))
	}
	if r.Skipped > 0 {
		fmt.Fprintf(w, "warning: %s: %d damaged records skipped\n", cmdutil.Quote(r.Name), r.Skipped)
	}
	if r.Outcomes.Total() == 0 {
		fmt.Fprintf(w, "warning: %s: no session events; was it recorded by repro or sim run?\n", cmdutil.Quote(r.Name))
	}
}
