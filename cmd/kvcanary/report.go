package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/outfile"
	kvreport "github.com/kvcanary/kvcanary/report"
)

// ReportOptions are the inputs of `kvcanary report`.
type ReportOptions struct {
	IO     *cmdutil.IOStreams
	Ctx    context.Context // cancels reading (SIGINT, SIGTERM)
	Paths  []string
	Format string // "html" | "md"
	Out    string // "-" or "": stdout
}

// NewCmdReport builds `kvcanary report BUNDLE… -o report.html`.
func NewCmdReport(f *cmdutil.Factory, runF func(*ReportOptions) error) *cobra.Command {
	opts := &ReportOptions{IO: f.IO, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "report BUNDLE... -o report.html",
		Short: "Write a shareable report of an investigation: HTML with plots, or Markdown",
		Long: `Write one self-contained report of the given runs, in the order of the
investigation: the corruption rate of each run with its 95% interval; the three
layers' verdicts for the first run with their evidence (mismatching rooms and
pages, overwritten pages and victims, divergent steps with top-k Jaccard);
A/B comparisons of every other run against the first (rates, Fisher's exact p,
confounds); plots (corruption by batch size and over time, the top-k Jaccard
distribution, scheduler pressure with the corrupted sessions marked, the rates
per run); each run's settings with their provenance; and the commands that
re-check every claim.

The first bundle is the subject; give its A/B arms after it. Each bundle is
judged afresh by the checksum, canary and graphdiff analyzers. A layer a
bundle did not observe is reported as not measured.

--format html (the default) is one file with inline SVG, no script and no
network fetch: it opens offline and can be attached to an issue. --format md
is Markdown for a GitHub issue (plots as tables). Quoted model output is
escaped in both.`,
		Example: `  kvcanary report baseline.kvtrace -o report.html
  kvcanary report baseline.kvtrace no-overlap.kvtrace --format md > issue.md`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			if opts.Format != "html" && opts.Format != "md" {
				return cmdutil.UsageError("--format %s: unknown format (want html or md)", cmdutil.Quote(opts.Format))
			}
			return runOr(opts, runF, reportRun)
		},
	}
	cmd.Flags().StringVar(&opts.Format, "format", "html", "output format: html or md")
	cmd.Flags().StringVarP(&opts.Out, "output", "o", "-", "output file (\"-\": stdout)")
	return cmd
}

func reportRun(opts *ReportOptions) error {
	var runs []*kvreport.Run
	for _, path := range opts.Paths {
		b, err := openBundle(opts.Ctx, path)
		if err != nil {
			return err
		}
		r, err := kvreport.Read(path, b.Reader)
		if err == nil {
			damageOf(b.Reader).warn(opts.IO.ErrOut, path)
		}
		b.Close()
		if err != nil {
			return cmdutil.InputError(err)
		}
		runs = append(runs, r)
	}
	rep := kvreport.Build(runs)
	write := rep.WriteHTML
	if opts.Format == "md" {
		write = rep.WriteMarkdown
	}
	if opts.Out == "" || opts.Out == "-" {
		return write(opts.IO.Out)
	}
	if err := writeFile(opts.Ctx, opts.Out, write); err != nil {
		return err
	}
	fmt.Fprintf(opts.IO.ErrOut, "wrote %s\n", cmdutil.Quote(opts.Out))
	return nil
}

// writeFile writes path through write, replacing a regular file only when
// all went well; a device or FIFO at path is written in place, a symbolic
// link followed (internal/outfile).
func writeFile(ctx context.Context, path string, write func(io.Writer) error) error {
	err := outfile.WriteFile(orBackground(ctx), path, outfile.Options{Perm: 0o644}, func(f *os.File) error { return write(f) })
	if err != nil {
		return cmdutil.InputError(err)
	}
	return nil
}
