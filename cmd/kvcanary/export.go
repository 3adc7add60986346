package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/traces/perfetto"
)

// traceExportFormats are --format's values (completion offers them too).
var traceExportFormats = []string{"perfetto"}

// TraceExportOptions are the inputs of `kvcanary trace export`.
type TraceExportOptions struct {
	IO     *cmdutil.IOStreams
	Ctx    context.Context // cancels reading (SIGINT, SIGTERM)
	JSON   *cmdutil.JSONFlags
	Path   string
	Format string
	Out    string // "-" or "": stdout
}

// NewCmdTraceExport builds `kvcanary trace export --format perfetto FILE -o OUT`.
func NewCmdTraceExport(f *cmdutil.Factory, runF func(*TraceExportOptions) error) *cobra.Command {
	opts := &TraceExportOptions{IO: f.IO, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "export --format perfetto FILE -o OUT.json",
		Short: "Write a bundle as a timeline that Perfetto and chrome://tracing open",
		Long: `Write a bundle as Chrome trace-event JSON, which ui.perfetto.dev and
chrome://tracing open: a process per source (host and process), a track of
engine steps (graph or eager replay, batch size), a track per CUDA stream seen
by probe cuda (launches, graph replays, capture windows, event records joined
to their waits by flow arrows), PD transfers per room as async slices, counter
tracks (running and queued requests, KV token usage, retractions, GPU memory
and utilisation), and an instant per finding (room mismatch, live-page
overwrite, graph≠eager) and per session, with their evidence in args.

The export streams: memory does not grow with the bundle. graphdiff.sample and
canary.pages events are left out (their verdicts are in the findings). A bundle
cut short exports its complete frames; the JSON written is always complete.`,
		Example: `  kvcanary trace export --format perfetto run.kvtrace -o run.json
  # then open run.json at https://ui.perfetto.dev (it stays in the browser)`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Path = args[0]
			if !slices.Contains(traceExportFormats, opts.Format) {
				return cmdutil.UsageError("--format %s: unknown format (want %s)", cmdutil.Quote(opts.Format), strings.Join(traceExportFormats, " or "))
			}
			return runOr(opts, runF, traceExportRun)
		},
	}
	cmd.Flags().StringVar(&opts.Format, "format", "perfetto", "output format: perfetto (Chrome trace-event JSON)")
	cmd.Flags().StringVarP(&opts.Out, "output", "o", "-", "output file (\"-\": stdout)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func traceExportRun(opts *TraceExportOptions) error {
	b, err := openBundle(opts.Ctx, opts.Path)
	if err != nil {
		return err
	}
	defer b.Close()
	out := opts.IO.Out
	var file *os.File
	if opts.Out != "" && opts.Out != "-" {
		if file, err = os.Create(opts.Out); err != nil {
			return fmt.Errorf("create %s: %w", cmdutil.Quote(opts.Out), err)
		}
		defer file.Close()
		out = file
	}
	w := perfetto.NewWriter(out)
	rerr := perfetto.Export(b.Reader, w)
	if err := w.Close(); err != nil {
		return fmt.Errorf("write %s: %w", cmdutil.Quote(opts.Out), err)
	}
	if file != nil {
		if err := file.Close(); err != nil {
			return fmt.Errorf("write %s: %w", cmdutil.Quote(opts.Out), err)
		}
	}
	if rerr != nil {
		return cmdutil.InputError(rerr)
	}
	damageOf(b.Reader).warn(opts.IO.ErrOut, opts.Path)
	st := w.Stats()
	if opts.JSON.JSON {
		return cmdutil.WriteJSON(opts.IO.ErrOut, st)
	}
	if file != nil {
		fmt.Fprintf(opts.IO.ErrOut, "wrote %s: %d trace events (%d steps, %d CUDA streams, %d findings, %d PD transfers) from %d events; open it at https://ui.perfetto.dev\n",
			cmdutil.Quote(opts.Out), st.TraceEvents, st.Steps, st.Streams, st.Findings, st.Transfers, st.Events)
	}
	return nil
}
