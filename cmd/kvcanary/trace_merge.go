package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/input"
	"github.com/kvcanary/kvcanary/internal/outfile"
	"github.com/kvcanary/kvcanary/traces"
)

// TraceMergeOptions are the inputs of `kvcanary trace merge`.
type TraceMergeOptions struct {
	IO     *cmdutil.IOStreams
	Ctx    context.Context
	JSON   *cmdutil.JSONFlags
	Paths  []string
	Out    string
	Align  bool
	Window int
}

// traceMergeLong is the long help of `kvcanary trace merge`.
const traceMergeLong = `Merge bundles recorded on several hosts (a prefill host and a decode host of a
PD deployment, say) into one bundle ordered by event time, so every offline
command (checksum compare, trace inspect, watch --bundle) reads the run as one.

The merge streams: memory is bounded by --window event lines per input,
whatever the bundles' size. An event more than --window lines out of place in
its own bundle comes out late, and is counted, never dropped.

Clocks: each host stamps its own events. The merge estimates each bundle's
clock offset against the first one from the manifests' start times (exact only
if the recordings were started together), prints it, and records it in the
merged manifest (labels merge.N.offset_ns). It applies the offsets only with
--align start; otherwise events keep their timestamps (hosts synchronised by
NTP or PTP are usually closer than a start-time estimate).

An offset that cannot be estimated (a manifest without a start time) is shown
as unknown, and --align start refuses such an input.

Damaged and truncated inputs are merged as far as they read, with a warning
each; their drop and refusal counts are carried into the merged footer, with
each input's damage (merge.N.footer, merge.N.truncated, merge.N.skipped) and,
when an input has no footer, dropped_unknown: its drops are unknown. Settings
that differ between the inputs are left unset in the merged manifest (each
input's are kept in its labels). The merge writes a temporary file beside OUT
and renames it to OUT only when it completed: an interrupted merge leaves no
bundle at OUT. A device or FIFO at OUT (/dev/stdout, a pipe) is written in
place, never replaced; a symbolic link at OUT is followed and kept.`

// NewCmdTraceMerge builds `kvcanary trace merge A B … -o OUT`.
func NewCmdTraceMerge(f *cmdutil.Factory, runF func(*TraceMergeOptions) error) *cobra.Command {
	opts := &TraceMergeOptions{IO: f.IO, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "merge A.kvtrace B.kvtrace … -o ALL.kvtrace",
		Short: "Merge bundles from several hosts into one timeline",
		Long:  traceMergeLong,
		Example: `  kvcanary trace merge prefill.kvtrace decode.kvtrace -o pd.kvtrace
  kvcanary checksum compare pd.kvtrace`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			if opts.Out == "" {
				return cmdutil.UsageError("trace merge: -o OUT is required")
			}
			if opts.Window < 1 {
				return cmdutil.UsageError("trace merge: --window %d: want at least 1", opts.Window)
			}
			return runOr(opts, runF, traceMergeRun)
		},
	}
	var align string
	cmd.Flags().StringVarP(&opts.Out, "output", "o", "", "write the merged bundle here")
	cmd.Flags().StringVar(&align, "align", "none", "clock alignment: none (report the estimated offsets) or start (also apply them)")
	cmd.Flags().IntVar(&opts.Window, "window", traces.DefaultMergeWindow, "event lines per input held for reordering")
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		switch align {
		case "none":
		case "start":
			opts.Align = true
		default:
			return cmdutil.UsageError("trace merge: --align %q: want none or start", align)
		}
		return nil
	}
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func traceMergeRun(opts *TraceMergeOptions) error {
	ctx := orBackground(opts.Ctx)
	files, err := openMergeInputs(ctx, opts)
	defer func() {
		for _, b := range files {
			b.Close()
		}
	}()
	if err != nil {
		return err
	}
	inputs := make([]*traces.Reader, len(files))
	for i, b := range files {
		inputs[i] = b.Reader
	}
	mo := traces.MergeOptions{Align: opts.Align, Window: opts.Window, Tool: "kvcanary " + buildinfo.String()}
	plan := traces.PlanMerge(inputs, mo)
	if err := traces.CheckAlign(plan, mo); err != nil {
		return cmdutil.UsageError("trace merge: --align start: %v (use --align none)", err)
	}
	// Write beside OUT and rename only when the merge completed: an
	// interrupted or failed merge must not leave a complete-looking bundle
	// (Close writes a footer) at OUT. A device or FIFO is written in place.
	out, err := outfile.Create(ctx, opts.Out, outfile.Options{Perm: 0o600})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return cmdutil.InputError(err)
	}
	w, err := traces.NewWriter(out, traces.MergeManifest(plan, mo, traces.InputManifests(inputs)))
	if err != nil {
		out.Abort()
		return cmdutil.InputError(err)
	}
	start := time.Now()
	rep, err := traces.Merge(ctx, inputs, plan, w, mo)
	cerr := w.Close()
	if err == nil {
		err = cerr
	}
	if err == nil {
		err = out.Commit()
	}
	if err != nil {
		out.Abort()
		if errors.Is(err, context.Canceled) {
			return err
		}
		return cmdutil.InputError(err)
	}
	warnMerge(opts, inputs, rep)
	res := TraceMergeReport{MergeReport: rep, Partial: mergeShortfalls(rep)}
	if len(res.Partial) > 0 {
		res.Status = StatusPartial
	}
	if opts.JSON.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, res)
	}
	return writeMergeReport(opts.IO.Out, opts.Out, res, time.Since(start))
}

// TraceMergeReport is the --json shape of `kvcanary trace merge`:
// traces.MergeReport's fields and, when producers sent more events than the
// inputs hold (a collector killed before it flushed), status "partial" with
// one line per such producer.
type TraceMergeReport struct {
	traces.MergeReport
	Status  string   `json:"status,omitempty"`
	Partial []string `json:"partial,omitempty"`
}

// mergeShortfalls judges the merge's per-producer counts as the analyzers
// judge a bundle's (analyzers.Coverage.Shortfalls).
func mergeShortfalls(rep traces.MergeReport) []string {
	var c analyzers.Coverage
	for _, p := range rep.Producers {
		c.Counts = append(c.Counts, analyzers.ProducerCount{ProducerEnd: analyzers.ProducerEnd{Node: p.Src.Node, Proc: p.Src.Proc,
			PID: p.Src.PID, Role: p.Src.Role, Rank: p.Src.Rank}, Sent: p.Sent, Held: p.Held})
	}
	return c.Shortfalls()
}

// openMergeInputs opens every input bundle, refusing the output among them
// (by name or by file) and a bundle given twice: the same path, the same file
// (a hard or symbolic link), the same bytes, or a copy with the same manifest
// (created and run), which would double every event it shares. The manifest
// decides rather than the footer, which is known only at the end: a truncated
// copy has no footer, and doubles the events as well. The bundles opened so
// far are returned with an error.
func openMergeInputs(ctx context.Context, opts *TraceMergeOptions) ([]*bundleFile, error) {
	outAbs, _ := filepath.Abs(opts.Out)
	outInfo, _ := os.Stat(opts.Out)
	if err := input.CheckDistinct(opts.Paths); err != nil {
		return nil, cmdutil.InputError(fmt.Errorf("trace merge: %w", err))
	}
	var files []*bundleFile
	for _, p := range opts.Paths {
		if a, _ := filepath.Abs(p); a == outAbs {
			return files, cmdutil.UsageError("trace merge: -o %s is also an input", cmdutil.Quote(opts.Out))
		}
		if fi, err := os.Stat(p); err == nil && outInfo != nil && os.SameFile(fi, outInfo) {
			return files, cmdutil.UsageError("trace merge: -o %s is also an input", cmdutil.Quote(opts.Out))
		}
		b, err := openBundle(ctx, p)
		if err != nil {
			return files, err
		}
		m := b.Manifest()
		for _, o := range files {
			if om := o.Manifest(); !m.Created.IsZero() && m.Created.Equal(om.Created) && m.Run == om.Run {
				b.Close()
				return files, cmdutil.InputError(fmt.Errorf("trace merge: inputs %s and %s are the same recording (manifest created %s, run %s): a copy merged with its original doubles every event; pass each bundle once",
					cmdutil.Quote(o.Name()), cmdutil.Quote(b.Name()), m.Created.UTC().Format(time.RFC3339Nano), cmdutil.Quote(m.Run)))
			}
		}
		files = append(files, b)
	}
	return files, nil
}

// warnMerge says on stderr what the merge could not do perfectly: damaged
// inputs, events written late, unknown drops, settings that differ.
func warnMerge(opts *TraceMergeOptions, inputs []*traces.Reader, rep traces.MergeReport) {
	for i, in := range rep.Inputs {
		warnBundle(opts.IO.ErrOut, in.Name, in.Truncated, in.TruncationReason, in.Skipped, inputs[i].Skips())
	}
	if rep.OutOfOrder > 0 {
		fmt.Fprintf(opts.IO.ErrOut, "warning: %d events were more than --window %d lines out of place in their bundle and are written late (by up to %s); raise --window to order them\n",
			rep.OutOfOrder, opts.Window, time.Duration(rep.MaxLatenessNS))
	}
	if rep.DroppedUnknown {
		fmt.Fprintln(opts.IO.ErrOut, "warning: an input has no footer, so its drops are unknown: the merged bundle's dropped count is a lower bound (footer dropped_unknown)")
	}
	if len(rep.ConfigDiffers) > 0 {
		fmt.Fprintf(opts.IO.ErrOut, "warning: the inputs' settings differ (%s): the merged manifest leaves them unset; each input's are in its merge.N.config / merge.N.host_info labels\n",
			strings.Join(rep.ConfigDiffers, ", "))
	}
}

func writeMergeReport(out io.Writer, path string, res TraceMergeReport, took time.Duration) error {
	rep := res.MergeReport
	q := cmdutil.Quote
	fmt.Fprintf(out, "merged %d events from %d bundles into %s (%.1f MB of events in %s)\n",
		rep.Events, len(rep.Inputs), q(path), float64(rep.BytesIn)/1e6, took.Round(time.Millisecond))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "input\thost\trun\tevents\tmanifest start\tclock offset (est.)\tapplied\tdamage")
	for _, in := range rep.Inputs {
		var dmg []string
		if in.Truncated {
			dmg = append(dmg, "truncated")
		}
		if in.Skipped > 0 {
			dmg = append(dmg, fmt.Sprintf("%d skipped", in.Skipped))
		}
		if !in.HasFooter {
			dmg = append(dmg, "no footer (drops unknown)")
		}
		damage := "-"
		if len(dmg) > 0 {
			damage = strings.Join(dmg, ", ")
		}
		offset := "unknown"
		if in.OffsetKnown {
			offset = signedDuration(in.OffsetNS)
		}
		started := "unknown"
		if !in.Created.IsZero() {
			started = in.Created.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", q(in.Name), q(orDash(in.Host)), q(orDash(in.Run)), in.Events,
			started, offset, signedDuration(in.AppliedNS), damage)
	}
	tw.Flush()
	if rep.Aligned {
		fmt.Fprintln(out, "timestamps were shifted by the applied offsets (--align start); the merged manifest records them")
	} else {
		fmt.Fprintln(out, "clock offsets are estimates from the manifests' start times, recorded in the merged manifest, not applied (--align start applies them)")
	}
	for _, p := range res.Partial {
		fmt.Fprintf(out, "partial: %s: events lost on the way (a collector killed before it wrote them?)\n", p)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func signedDuration(ns int64) string {
	if ns > 0 {
		return "+" + time.Duration(ns).String()
	}
	return time.Duration(ns).String()
}
