package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// GraphDiffReportOptions are the inputs of `kvcanary graphdiff report`.
type GraphDiffReportOptions struct {
	IO   *cmdutil.IOStreams
	Ctx  context.Context // cancels reading (SIGINT, SIGTERM)
	JSON *cmdutil.JSONFlags
	Path string // a trace bundle
	// Limit is how many of the worst samples are kept and listed (text
	// and --json); 0 keeps graphdiff.DefaultWorst.
	Limit int
}

// GraphDiffReport is the --json shape of `kvcanary graphdiff report`.
type GraphDiffReport struct {
	Input         string              `json:"input"`
	Headline      string              `json:"headline"`
	GraphDiff     graphdiff.Summary   `json:"graphdiff"`
	Findings      []*hook.Finding     `json:"findings"` // first reportMaxFindings
	FindingsTotal int                 `json:"findings_total"`
	Bundle        GraphDiffBundleInfo `json:"bundle"`
	// When the bundle's producers reported lost evidence bearing on
	// graphdiff (run.end): Status "partial", what was lost (one line per
	// producer) and every producer's losses.
	Status   string              `json:"status,omitempty"`
	Partial  []string            `json:"partial,omitempty"`
	Coverage *analyzers.Coverage `json:"coverage,omitempty"`
}

// GraphDiffBundleInfo says how much of a bundle was usable.
type GraphDiffBundleInfo struct {
	Events  uint64 `json:"events"`
	Samples uint64 `json:"graphdiff_samples"`
	BundleDamage
}

// NewCmdGraphDiff builds `kvcanary graphdiff` and its subcommands.
func NewCmdGraphDiff(f *cmdutil.Factory, runF func(*GraphDiffReportOptions) error) *cobra.Command {
	return newGroupCmd(groupHelp{
		Use:   "graphdiff",
		Short: "Judge graph-vs-eager differentials (captured replay against an eager rerun)",
		Example: `  kvcanary graphdiff report run.kvtrace
  kvcanary graphdiff report run.kvtrace --json`,
		Long: `A graph-vs-eager sample runs one decode step twice from the same inputs: as the
captured CUDA graph and eagerly. Rounding differences are absorbed by a
dtype-aware tolerance (allclose, then error against a float64 reference); a
changed top-k selection is always a divergence. See graphdiff/SPEC.md.`,
	}, NewCmdGraphDiffReport(f, runF))
}

// NewCmdGraphDiffReport builds `kvcanary graphdiff report`.
func NewCmdGraphDiffReport(f *cmdutil.Factory, runF func(*GraphDiffReportOptions) error) *cobra.Command {
	opts := &GraphDiffReportOptions{IO: f.IO, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "report BUNDLE",
		Short: "Report graph-vs-eager divergence from a trace bundle",
		Example: `  kvcanary sim run --record run.kvtrace
  kvcanary graphdiff report run.kvtrace
  kvcanary graphdiff report run.kvtrace --json | jq .status`,
		Long: `Replay a trace bundle's graphdiff.sample events through the graphdiff analyzer:
a headline (divergent samples, requests, worst top-k Jaccard), the worst
samples, and the histogram of top-k Jaccard similarity.

No data: a bundle without graphdiff.sample events (recorded without the
graphdiff instrument, such as a repro bundle of sessions only, or an empty
bundle) is not a verdict. The report says so in one sentence naming what
produces them (kvcanary wrap or the twin's sim run --record; no engine log
line carries them) and, when the run's recorded settings explain it, why;
--json prints {"status": "no-data", "message": …}, and the exit code is 4.

` + partialHelp + `

Exit codes: 0 no divergence, 1 a divergent sample, 3 the input is unreadable or
not a bundle (the message says what it is), 4 no data, or no divergence over
partial evidence, 130 interrupted.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: runOnPath(opts, &opts.Path, runF, graphDiffReportRun),
	}
	cmdutil.AddLimitFlag(cmd, &opts.Limit, 0, 1, "worst samples kept and listed, text and --json (default 8)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func graphDiffReportRun(opts *GraphDiffReportOptions) error {
	an := graphdiff.NewAnalyzer(graphdiff.Options{})
	an.KeepWorst(opts.Limit)
	b, err := openBundle(opts.Ctx, opts.Path)
	if err != nil {
		return err
	}
	defer b.Close()
	seen := &runConfigSeen{Analyzer: an}
	br, err := replayBundle(b, seen, reportMaxFindings)
	if err != nil {
		return err
	}
	if br.kinds[hook.KindGraphDiffSample] == 0 {
		detail := graphDiffNoDataDetail(seen.cfg, an.Result().NoSamplesReason)
		if n := seen.graphReplays; n > 0 {
			// Graph replays there were: the sampling missed every one.
			detail = strings.TrimSuffix(fmt.Sprintf("0 of %s sampled: a run this short needs a denser rate, "+
				"e.g. kvcanary wrap --graphdiff-every 1 (the default reruns one step in 256); %s", plural(int64(n), "graph replay"), detail), "; ")
		}
		return br.noData(opts.IO, opts.JSON.JSON, opts.Path, cmdutil.InstrumentGraphDiff, detail)
	}
	rep := GraphDiffReport{
		Input: opts.Path, GraphDiff: an.Result(), Findings: br.findings, FindingsTotal: br.findingsTotal,
		Bundle: GraphDiffBundleInfo{
			Events: br.events, Samples: br.kinds[hook.KindGraphDiffSample], BundleDamage: br.damage(),
		},
	}
	if rep.Findings == nil {
		rep.Findings = []*hook.Finding{}
	}
	rep.Headline = graphDiffHeadline(&rep.GraphDiff)
	if lost := br.coverage.Lost(graphdiff.AnalyzerName); len(lost) > 0 {
		rep.Status, rep.Partial, rep.Coverage = StatusPartial, lost, &br.coverage
	}

	if err := writeJSONOr(opts.IO.Out, opts.JSON.JSON, rep, func() error { return writeGraphDiffText(opts.IO, &rep) }); err != nil {
		return err
	}
	br.warn(opts.IO.ErrOut, opts.Path)
	if rep.GraphDiff.Divergent > 0 {
		return cmdutil.FindingError
	}
	if rep.Status == StatusPartial {
		return PartialError
	}
	return nil
}

// runConfigSeen passes events to an analyzer and keeps the last run.start's
// settings (the manifest's, then the bundle's own run.start events).
// It also counts the graph replays, the steps graph-vs-eager samples.
type runConfigSeen struct {
	hook.Analyzer
	cfg          hook.RunConfig
	graphReplays uint64
}

func (r *runConfigSeen) Observe(ev hook.Event, emit func(hook.Event)) {
	switch b := ev.Body.(type) {
	case *hook.RunStart:
		r.cfg = b.Config
	case *hook.Replay:
		if b != nil && b.Mode == "graph" {
			r.graphReplays++
		}
	}
	r.Analyzer.Observe(ev, emit)
}

// graphDiffNoDataDetail is the analyzer's explanation of a run without
// samples, when whether the engine captured graphs is known (the twin, the
// SGLang hooks with --config, a server that reported it: RunConfig's
// provenance); when it is not, "CUDA graphs are disabled" would be a guess
// stated as a fact.
func graphDiffNoDataDetail(cfg hook.RunConfig, reason string) string {
	switch {
	case reason == "" || reason == graphdiff.NoSamplesUnknown:
		return ""
	case cfg.CUDAGraph == nil:
		return ""
	}
	return reason
}

// graphDiffRawDiff says how many samples differ by rounding, and of how
// many with logit rows when some carried selections only.
func graphDiffRawDiff(s *graphdiff.Summary) string {
	n := cmdutil.Commas(uint64(s.RawDiffSamples))
	if s.SelectionOnly > 0 {
		n += " of " + cmdutil.Commas(uint64(s.Samples-s.SelectionOnly)) + " with logit rows"
	}
	return n
}

// graphDiffHeadline is the report's first line, e.g.
// "GRAPH≠EAGER: 37/512 samples diverge (12 requests); worst top-k Jaccard 0.41".
func graphDiffHeadline(s *graphdiff.Summary) string {
	if s.Samples == 0 {
		return "no graph-vs-eager samples: " + s.NoSamplesReason
	}
	j := "1"
	if s.MinTopKJaccard != nil {
		j = strconv.FormatFloat(*s.MinTopKJaccard, 'f', 2, 64)
	}
	if s.Divergent == 0 {
		return fmt.Sprintf("graph = eager within tolerance: 0/%s samples diverge (%s differ by rounding, max abs diff %s); worst top-k Jaccard %s",
			cmdutil.Commas(uint64(s.Samples)), graphDiffRawDiff(s), graphdiff.FormatFloat(s.MaxAbsDiff), j)
	}
	req := units(int64(s.DivergentRequests), "request")
	sess := ""
	if s.DivergentSessions > 0 {
		sess = fmt.Sprintf(", %d %s", s.DivergentSessions, units(int64(s.DivergentSessions), "session"))
		if s.DivergentSessionsLeaked > 0 {
			sess += fmt.Sprintf(" of which %d leaked", s.DivergentSessionsLeaked)
		}
	}
	return fmt.Sprintf("GRAPH≠EAGER: %s/%s samples diverge (%d %s%s); worst top-k Jaccard %s",
		cmdutil.Commas(uint64(s.Divergent)), cmdutil.Commas(uint64(s.Samples)), s.DivergentRequests, req, sess, j)
}

func writeGraphDiffText(ios *cmdutil.IOStreams, rep *GraphDiffReport) error {
	s := &rep.GraphDiff
	tty := ios.IsStdoutTTY()
	var b strings.Builder
	b.WriteString(rep.Headline + "\n")
	b.WriteString(partialText(rep.Partial))
	if s.Samples == 0 {
		fmt.Fprintf(&b, "(%s events read from %s)\n", cmdutil.Commas(rep.Bundle.Events), cmdutil.Quote(rep.Input))
		_, err := fmt.Fprint(ios.Out, b.String())
		return err
	}
	if len(s.Reasons) > 0 {
		b.WriteString("reasons: " + s.ReasonCounts() + "\n")
	}
	fmt.Fprintf(&b, "max abs diff %s (largest within tolerance %s), max rel RMSE %s, max KL %s\n",
		graphdiff.FormatFloat(s.MaxAbsDiff), graphdiff.FormatFloat(s.MaxAbsDiffPassing), graphdiff.FormatFloat(s.MaxRelRMSE), graphdiff.FormatFloat(s.MaxKL))

	b.WriteString("\nworst samples\n")
	rows := s.WorstTable()
	cmdutil.WriteTable(&b, tty, rows)

	b.WriteString("\ntop-k Jaccard histogram\n")
	rows = [][]string{{"JACCARD", "SAMPLES"}}
	peak := 0
	for _, h := range s.JaccardHist {
		peak = max(peak, h.Count)
	}
	for _, h := range s.JaccardHist {
		row := []string{h.Label, cmdutil.Commas(uint64(h.Count))}
		if tty && peak > 0 {
			row = append(row, strings.Repeat("█", (h.Count*30+peak-1)/peak))
		}
		rows = append(rows, row)
	}
	cmdutil.WriteTable(&b, tty, rows)
	if s.FindingsSuppressed > 0 {
		fmt.Fprintf(&b, "\n%s further findings not emitted (per-run cap)\n", cmdutil.Commas(s.FindingsSuppressed))
	}
	_, err := fmt.Fprint(ios.Out, b.String())
	return err
}
