package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
	Format string // "html" | "md" | "": html, or md to a terminal or a .md file (reportFormat)
	Out    string // "-" or "": stdout ("-" asks for HTML on a terminal too)
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

--format html is one file with inline SVG, no script and no network fetch: it
opens offline and can be attached to an issue. --format md is Markdown for a
GitHub issue (plots as tables). Quoted model output is escaped in both.
Without --format the report is HTML, except on a terminal (no -o) and in a
file named *.md, which get Markdown: raw HTML is unreadable on a terminal.`,
		Example: `  kvcanary report baseline.kvtrace -o report.html
  kvcanary report baseline.kvtrace no-overlap.kvtrace --format md > issue.md
  kvcanary report baseline.kvtrace          # Markdown on a terminal`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			if opts.Format != "" && !slices.Contains(reportFormats, opts.Format) {
				return cmdutil.UsageError("--format %s: unknown format (want %s)", cmdutil.Quote(opts.Format), strings.Join(reportFormats, " or "))
			}
			return runOr(opts, runF, reportRun)
		},
	}
	cmd.Flags().StringVar(&opts.Format, "format", "", "output format: html or md (default html; md on a terminal or to a .md file)")
	cmd.Flags().StringVarP(&opts.Out, "output", "o", "", "output file (default, or \"-\": stdout)")
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
	format := reportFormat(opts)
	if format == "md" {
		write = rep.WriteMarkdown
	}
	if opts.Out == "" || opts.Out == "-" {
		if opts.Format == "" && format == "md" {
			fmt.Fprintln(opts.IO.ErrOut, "report: Markdown on a terminal; -o report.html writes the HTML report with its plots")
		}
		return write(opts.IO.Out)
	}
	if err := writeFile(opts.Ctx, opts.Out, write); err != nil {
		return err
	}
	fmt.Fprintf(opts.IO.ErrOut, "wrote %s\n", cmdutil.Quote(opts.Out))
	return nil
}

// reportFormats are --format's values (completion offers them too).
var reportFormats = []string{"html", "md"}

// reportFormat is --format, or else what the output asks for: Markdown for
// a terminal (HTML would print as a wall of markup; -o - asks for it
// anyway) and for a file named *.md, HTML otherwise.
func reportFormat(opts *ReportOptions) string {
	switch {
	case opts.Format != "":
		return opts.Format
	case opts.Out == "" && opts.IO.IsStdoutTTY():
		return "md"
	case strings.EqualFold(filepath.Ext(opts.Out), ".md"):
		return "md"
	}
	return "html"
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
