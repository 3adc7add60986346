package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/safetext"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// NewCmdTrace builds `kvcanary trace` and its subcommands.
func NewCmdTrace(f *cmdutil.Factory) *cobra.Command {
	return newGroupCmd(groupHelp{
		Use:   "trace",
		Short: "Read trace bundles (.kvtrace)",
		Example: `  kvcanary trace inspect run.kvtrace
  kvcanary trace cat --kind finding run.kvtrace`,
		Long: `Read trace bundles (.kvtrace). A bundle is a zstd stream of JSON lines that
standard tools read too:

  zstdcat run.kvtrace | jq -c 'select(.kind == "room.checksum")'
  duckdb -c "select kind, count(*) from read_json('run.kvtrace', format='newline_delimited', compression='zstd') group by 1"

A truncated bundle (its writer was killed) is read up to its last complete frame;
the commands warn on stderr and exit 0; so does a bundle with damaged frames
(skipped and counted), a lost manifest, or frames cut by the decompression
budget (traces/FORMAT.md "Reading, truncation and damage"). A file that is not
a bundle exits 3, naming what it is (empty, gzip, text, binary); an interrupted
read exits 130.`,
	}, NewCmdTraceInspect(f, nil), NewCmdTraceCat(f, nil), NewCmdTraceMerge(f, nil), NewCmdTraceExport(f, nil))
}

// TraceInspectOptions are the inputs of `kvcanary trace inspect`.
type TraceInspectOptions struct {
	IO   *cmdutil.IOStreams
	Ctx  context.Context // cancels reading (SIGINT, SIGTERM)
	JSON *cmdutil.JSONFlags
	Path string
}

// NewCmdTraceInspect builds `kvcanary trace inspect FILE`.
func NewCmdTraceInspect(f *cmdutil.Factory, runF func(*TraceInspectOptions) error) *cobra.Command {
	opts := &TraceInspectOptions{IO: f.IO, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Show a bundle's manifest, event counts, time span and truncation",
		Example: `  kvcanary trace inspect run.kvtrace
  kvcanary trace inspect run.kvtrace --json | jq .counts`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: runOnPath(opts, &opts.Path, runF, traceInspectRun),
	}
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func traceInspectRun(opts *TraceInspectOptions) error {
	b, err := openBundle(opts.Ctx, opts.Path)
	if err != nil {
		return err
	}
	defer b.Close()
	s, err := traces.Summarize(b.Reader)
	if err != nil {
		return cmdutil.InputError(err)
	}
	s.File = opts.Path
	warnBundle(opts.IO.ErrOut, opts.Path, s.Truncated, s.TruncationReason, s.Skipped, s.Skips)
	if s.FooterMismatch != "" {
		fmt.Fprintf(opts.IO.ErrOut, "warning: %s: %s\n", cmdutil.Quote(opts.Path), s.FooterMismatch)
	}
	if opts.JSON.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, s)
	}
	return writeInspect(opts.IO.Out, s)
}

// warnBundle reports truncation and skipped damage on stderr.
func warnBundle(w io.Writer, path string, truncated bool, reason string, skipped uint64, skips []traces.Skip) {
	if truncated {
		fmt.Fprintf(w, "warning: %s is truncated (%s); read up to its last complete frame\n", cmdutil.Quote(path), reason)
	}
	if len(skips) > 0 && strings.HasPrefix(skips[0].Reason, "manifest frame: ") {
		fmt.Fprintf(w, "warning: %s: manifest lost (%s); its run configuration is unknown, the other frames were read\n", cmdutil.Quote(path), cmdutil.Quote(skips[0].String()))
	}
	if skipped > 0 {
		first := ""
		if len(skips) > 0 {
			first = "; first: " + cmdutil.Quote(skips[0].String())
		}
		fmt.Fprintf(w, "warning: %s: skipped %d unusable frames or lines%s\n", cmdutil.Quote(path), skipped, first)
		for _, sk := range skips {
			if strings.Contains(sk.Reason, "decompression budget") {
				fmt.Fprintf(w, "warning: %s: stopped decoding: %s\n", cmdutil.Quote(path), cmdutil.Quote(sk.String()))
				break
			}
		}
	}
}

func writeInspect(out io.Writer, s traces.Summary) error {
	m := s.Manifest
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	q := cmdutil.Quote
	fmt.Fprintf(tw, "bundle\t%s\n", q(s.File))
	version := q(s.FormatVersion)
	if s.ManifestLost != "" {
		version = "unknown" // the manifest states it
	}
	fmt.Fprintf(tw, "format\t%s (%d frames, %d bytes, %d bytes of JSON)\n", version, s.Frames, s.Bytes, s.JSONBytes)
	if s.ManifestLost != "" {
		// Nothing of it was read: its fields would print their zero values
		// (created 0001-01-01, config {}) as if the bundle had said so.
		fmt.Fprintf(tw, "manifest\tlost (%s): tool, created, run, host and config unknown\n", q(s.ManifestLost))
	} else {
		fmt.Fprintf(tw, "tool\t%s\n", q(m.Tool))
		fmt.Fprintf(tw, "created\t%s\n", m.Created.UTC().Format(time.RFC3339Nano))
		fmt.Fprintf(tw, "run\t%s\n", q(m.Run))
		if m.Command != "" {
			fmt.Fprintf(tw, "command\t%s\n", q(m.Command))
		}
		for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
			fmt.Fprintf(tw, "label\t%s=%s\n", q(k), q(m.Labels[k]))
		}
		fmt.Fprintf(tw, "host\t%s\n", hostLine(m.Host))
		cfg, _ := json.Marshal(m.Config) // plain struct: cannot fail
		fmt.Fprintf(tw, "config\t%s\n", q(string(cfg)))
	}
	span := ""
	if s.Events > 0 {
		span = fmt.Sprintf(" over %s (%s to %s)", time.Duration(s.SpanNS),
			time.Unix(0, s.FirstTS).UTC().Format(time.RFC3339Nano), time.Unix(0, s.LastTS).UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(tw, "events\t%d%s\n", s.Events, span)
	for _, k := range hook.Kinds() {
		if n := s.Counts[k.String()]; n > 0 {
			fmt.Fprintf(tw, "  %s\t%d\n", k, n)
		}
	}
	switch {
	case s.HasFooter && !s.Truncated:
		dropped := fmt.Sprintf("%d dropped before the writer", s.Footer.Dropped)
		if s.Footer.DroppedUnknown {
			dropped = fmt.Sprintf("at least %d dropped before the writer (an input of the merge had no footer)", s.Footer.Dropped)
		}
		fmt.Fprintf(tw, "footer\tyes (%d events, %s, %d rejected)\n", s.Footer.Events, dropped, s.Footer.Rejected)
	case s.HasFooter:
		fmt.Fprintf(tw, "footer\tyes\n")
	default:
		fmt.Fprintf(tw, "footer\tno\n")
	}
	if s.Truncated {
		fmt.Fprintf(tw, "truncated\tyes: %s\n", s.TruncationReason)
	} else {
		fmt.Fprintf(tw, "truncated\tno\n")
	}
	fmt.Fprintf(tw, "skipped\t%d\n", s.Skipped)
	for _, sk := range s.Skips {
		fmt.Fprintf(tw, "  \t%s\n", q(sk.String()))
	}
	return tw.Flush()
}

func hostLine(h hook.HostInfo) string {
	var b strings.Builder
	b.WriteString(cmdutil.Quote(h.Hostname))
	if h.OS != "" || h.Arch != "" {
		fmt.Fprintf(&b, " %s/%s", cmdutil.Quote(h.OS), cmdutil.Quote(h.Arch))
	}
	if h.CPUs > 0 {
		fmt.Fprintf(&b, ", %d CPUs", h.CPUs)
	}
	if h.Driver != "" {
		fmt.Fprintf(&b, ", driver %s", cmdutil.Quote(h.Driver))
	}
	for _, g := range h.GPUs {
		fmt.Fprintf(&b, ", GPU %d %s", g.Index, cmdutil.Quote(g.Name))
	}
	return b.String()
}

// TraceCatOptions are the inputs of `kvcanary trace cat`.
type TraceCatOptions struct {
	IO    *cmdutil.IOStreams
	Ctx   context.Context // cancels reading (SIGINT, SIGTERM)
	Path  string
	Kinds []string
	All   bool
}

// NewCmdTraceCat builds `kvcanary trace cat FILE [--kind K]... [--all]`.
func NewCmdTraceCat(f *cmdutil.Factory, runF func(*TraceCatOptions) error) *cobra.Command {
	opts := &TraceCatOptions{IO: f.IO, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "cat FILE",
		Short: "Print a bundle's events as JSON lines",
		Example: `  kvcanary trace cat run.kvtrace | head
  kvcanary trace cat --kind finding --kind session run.kvtrace
  kvcanary trace cat --all run.kvtrace | head -1   # the manifest`,
		Long: `Print a bundle's events as JSON lines on stdout, one event per line in the
event model v1 form. --kind (repeatable or comma separated) keeps only those
kinds; --all also prints the manifest ({"kvtrace":…}) and footer
({"kvtrace_footer":…}) records.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: runOnPath(opts, &opts.Path, runF, traceCatRun),
	}
	cmd.Flags().StringSliceVar(&opts.Kinds, "kind", nil, "print only events of this kind (repeatable): "+kindList())
	cmd.Flags().BoolVar(&opts.All, "all", false, "also print the manifest and footer records")
	return cmd
}

func kindList() string {
	var names []string
	for _, k := range hook.Kinds() {
		names = append(names, k.String())
	}
	return strings.Join(names, ", ")
}

func traceCatRun(opts *TraceCatOptions) error {
	var keep [256]bool
	for _, name := range opts.Kinds {
		k, err := hook.ParseKind(strings.TrimSpace(name))
		if err != nil {
			return cmdutil.UsageError("--kind: %w (known: %s)", err, kindList())
		}
		keep[k] = true
	}
	filter := len(opts.Kinds) > 0
	r, err := openBundle(opts.Ctx, opts.Path)
	if err != nil {
		return err
	}
	defer r.Close()
	out := bufio.NewWriterSize(opts.IO.Out, 256<<10)
	var esc []byte // a line with C1 or bidi controls, escaped
	for {
		rec, err := r.NextRecord()
		if err == io.EOF {
			break
		}
		if err != nil {
			out.Flush() // what was read before the error still reaches stdout
			return cmdutil.InputError(err)
		}
		if rec.Type == traces.RecordEvent {
			if filter && !keep[rec.Kind] {
				continue
			}
		} else if !opts.All {
			continue
		}
		line := rec.Line
		if safetext.NeedsJSONEscape(line) {
			esc = safetext.EscapeJSON(esc[:0], line)
			line = esc
		}
		out.Write(line)
		if err := out.WriteByte('\n'); err != nil {
			return fmt.Errorf("write stdout: %w", err)
		}
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("write stdout: %w", err)
	}
	damageOf(r.Reader).warn(opts.IO.ErrOut, opts.Path)
	return nil
}
