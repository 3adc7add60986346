package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/input"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// CanaryReportOptions are the inputs of `kvcanary canary report`.
type CanaryReportOptions struct {
	IO   *cmdutil.IOStreams
	Ctx  context.Context // cancels reading (SIGINT, SIGTERM)
	JSON *cmdutil.JSONFlags
	Path string // a trace bundle or an SGLang server log
	// Limit is how many samples are kept and listed (text and --json):
	// per page class of a bundle, violations of a log; 0 keeps the
	// analyzers' defaults (canary.DefaultSamplesPerClass; 64 for a log).
	Limit int
}

// CanaryReport is the --json shape of `kvcanary canary report`.
type CanaryReport struct {
	Input  string `json:"input"`
	Format string `json:"format"` // "bundle" | "sglang-log"
	// Bundle input: the canary analyzer's run summary over the canary.pages
	// events, the findings it made (first reportMaxFindings), and what the
	// reader had to skip.
	Canary        *canary.Summary   `json:"canary,omitempty"`
	Findings      []*hook.Finding   `json:"findings,omitempty"`
	FindingsTotal int               `json:"findings_total"`
	Bundle        *CanaryBundleInfo `json:"bundle,omitempty"`
	// Log input: SGLang's own kv_canary violations, and the --kv-canary
	// mode the log's server_args line states ("" when it has none).
	SGLang   *canary.LogScan `json:"sglang,omitempty"`
	KVCanary string          `json:"kv_canary,omitempty"`
	// Bundle input whose producers reported lost evidence bearing on the
	// canary (run.end): Status "partial", what was lost (one line per
	// producer) and every producer's losses.
	Status   string              `json:"status,omitempty"`
	Partial  []string            `json:"partial,omitempty"`
	Coverage *analyzers.Coverage `json:"coverage,omitempty"`
}

// CanaryBundleInfo says how much of a bundle was usable.
type CanaryBundleInfo struct {
	Events      uint64 `json:"events"`
	CanaryPages uint64 `json:"canary_pages"`
	BundleDamage
}

// NewCmdCanary builds `kvcanary canary` and its subcommands.
func NewCmdCanary(f *cmdutil.Factory, runF func(*CanaryReportOptions) error) *cobra.Command {
	return newGroupCmd(groupHelp{
		Use:   "canary",
		Short: "Judge what graph replays did to the index-K pool (live-page overwrites)",
		Example: `  kvcanary canary report run.kvtrace
  kvcanary canary report sglang-server.log      # a server run with --kv-canary log
  kvcanary canary report run.kvtrace --json | jq .status`,
		Long: `Around each CUDA graph replay the canary digests the index-K pages its policy
selects (live, all, sweep:N), diffs them, and classifies every changed page:
expected-store, benign-transfer, free-page, held-page or LIVE-PAGE-OVERWRITE.
An expected store that did not land is a missing store. Before each replay a
source may also compare the previous replay's pages with their after-digests
(phase "between"): writers outside a replay, such as speculative-decoding
moves, are judged by the same rules and counted apart. See canary/SPEC.md.`,
	}, NewCmdCanaryReport(f, runF))
}

// NewCmdCanaryReport builds `kvcanary canary report`.
func NewCmdCanaryReport(f *cmdutil.Factory, runF func(*CanaryReportOptions) error) *cobra.Command {
	opts := &CanaryReportOptions{IO: f.IO, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "report BUNDLE|LOG",
		Short: "Report live-page overwrites and missing stores from a bundle or an SGLang log",
		Example: `  kvcanary sim run --inject transfer-race --record run.kvtrace
  kvcanary canary report run.kvtrace
  kvcanary canary report sglang-server.log --json`,
		Long: `Report the canary verdicts of a run.

A trace bundle (.kvtrace, recognized by its zstd magic) is replayed through the
canary analyzer: the headline counts LIVE-PAGE-OVERWRITE hits over all replays
and states the coverage of the digest policy, followed by per-class counts and
samples; a second headline does the same for the checks between replays
(phase "between", e.g. speculative-decoding moves), or says they were not
made. A text file is read as an SGLang server log, and its
"kv_canary violation:" lines (SGLang --kv-canary log) are reported; a line over
1 MiB is judged by its first MiB. An empty, compressed (gzip, xz, …) or binary
file is refused: no verdict over bytes kvcanary cannot read.

No data: a bundle without canary.pages events (recorded without the canary
instrument, such as a repro bundle of sessions only, or an empty bundle) is not
a verdict. Nor is a log without violation lines unless its server_args line
says SGLang ran with --kv-canary log or raise (SGLang writes kv_canary lines
only on a violation, so silence alone proves nothing). The report says so in
one sentence naming what produces them (kvcanary wrap, the twin's sim run
--record, or an SGLang log run with --kv-canary log), --json prints
{"status": "no-data", "message": …}, and the exit code is 4.

` + partialHelp + `

Exit codes: 0 clean, 1 a live-page overwrite, a missing store or an SGLang
violation was found, 3 the input is unreadable, not a bundle or a text log, or
has malformed violation lines, 4 no data, or nothing found over partial
evidence, 130 interrupted.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: runOnPath(opts, &opts.Path, runF, canaryReportRun),
	}
	cmdutil.AddLimitFlag(cmd, &opts.Limit, 0, 1, "samples kept and listed, text and --json: per page class of a bundle (default 8) or violations of an SGLang log (default 64)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func canaryReportRun(opts *CanaryReportOptions) error {
	in, err := openInput(opts.Ctx, opts.Path, wantBundleOrLog, input.Zstd, input.Text, input.Binary)
	if err != nil {
		return err
	}
	if in.Kind == input.Binary && !in.BundleCandidate() {
		in.Close()
		return cmdutil.InputError(in.Expect(wantBundleOrLog, input.Zstd, input.Text))
	}
	if in.BundleCandidate() {
		b, err := bundleOver(opts.Ctx, in)
		if err != nil {
			return err
		}
		defer b.Close()
		return canaryBundleReport(opts, b)
	}
	defer in.Close()
	return canaryLogReport(opts, in)
}

func canaryBundleReport(opts *CanaryReportOptions, b *bundleFile) error {
	an := canary.NewAnalyzer(canary.Options{SamplesPerClass: opts.Limit})
	br, err := replayBundle(b, an, reportMaxFindings)
	if err != nil {
		return err
	}
	s := an.Result()
	if br.kinds[hook.KindCanaryPages] == 0 {
		return br.noData(opts.IO, opts.JSON.JSON, opts.Path, cmdutil.InstrumentCanary, "")
	}
	rep := CanaryReport{
		Input: opts.Path, Format: "bundle", Canary: &s, Findings: br.findings, FindingsTotal: br.findingsTotal,
		Bundle: &CanaryBundleInfo{
			Events: br.events, CanaryPages: br.kinds[hook.KindCanaryPages], BundleDamage: br.damage(),
		},
	}
	if lost := br.coverage.Lost(canary.AnalyzerName); len(lost) > 0 {
		rep.Status, rep.Partial, rep.Coverage = StatusPartial, lost, &br.coverage
	}
	if err := writeJSONOr(opts.IO.Out, opts.JSON.JSON, rep, func() error { return writeCanaryBundleText(opts.IO, &rep) }); err != nil {
		return err
	}
	br.warn(opts.IO.ErrOut, opts.Path)
	if s.Findings() {
		return cmdutil.FindingError
	}
	if s.UnknownPhase > 0 {
		// Observations this kvcanary cannot judge (a newer producer's phase):
		// a clean exit would vouch for pages nobody classified.
		return cmdutil.InputError(fmt.Errorf("%s: %s canary.pages events have a phase this kvcanary does not know; they were not judged (a newer producer? upgrade kvcanary)",
			opts.Path, cmdutil.Commas(s.UnknownPhase)))
	}
	if rep.Status == StatusPartial {
		return PartialError
	}
	return nil
}

func canaryLogReport(opts *CanaryReportOptions, f io.Reader) error {
	arg := &kvCanaryArg{r: f}
	scan, err := canary.ScanLog(arg, opts.Path, canary.LogOptions{MaxSamples: opts.Limit})
	if err != nil {
		return cmdutil.InputError(err)
	}
	if !scan.Findings() && scan.Malformed == 0 && arg.value != "log" && arg.value != "raise" {
		// SGLang writes kv_canary lines only on a violation: without them, a
		// log is clean only if it shows the canary was on.
		nd := cmdutil.NewNoData(cmdutil.InstrumentCanary, opts.Path, uint64(max(scan.Lines, 0)), "line")
		if arg.value != "" {
			nd.Detail = fmt.Sprintf("its server_args say kv_canary=%s: SGLang's canary was off", arg.value)
		} else {
			nd.Detail = "no server_args line in it says SGLang ran with --kv-canary log or raise, and SGLang writes kv_canary lines only on a violation"
		}
		return writeNoData(opts.IO.Out, opts.JSON.JSON, nd)
	}
	rep := CanaryReport{Input: opts.Path, Format: "sglang-log", SGLang: scan, KVCanary: arg.value, FindingsTotal: int(min(scan.Violations, 1<<31-1))}
	for i := range scan.Samples {
		if len(rep.Findings) >= reportMaxFindings {
			break
		}
		rep.Findings = append(rep.Findings, scan.Samples[i].Finding())
	}
	if err := writeJSONOr(opts.IO.Out, opts.JSON.JSON, rep, func() error { return writeCanaryLogText(opts.IO, scan, arg.value) }); err != nil {
		return err
	}
	for _, e := range scan.Errors {
		fmt.Fprintln(opts.IO.ErrOut, "kvcanary:", cmdutil.Quote(e))
	}
	if scan.Findings() {
		return cmdutil.FindingError
	}
	if scan.Malformed > 0 {
		return cmdutil.InputError(fmt.Errorf("%s: %d malformed kv_canary violation lines", opts.Path, scan.Malformed))
	}
	return nil
}

// kvCanaryArg passes a log through and remembers the last kv_canary mode
// its server_args line states (SGLang logs "server_args=ServerArgs(…,
// kv_canary='log', …)" at start-up): "none", "log", "raise", or "" when no
// line says. It looks across read boundaries with a small window.
type kvCanaryArg struct {
	r     io.Reader
	tail  []byte // the last bytes of the previous read
	value string
}

var kvCanaryKey = []byte("kv_canary=")

// kvCanaryWindow holds a key, its preceding byte and the longest value.
const kvCanaryWindow = 40

func (k *kvCanaryArg) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	if n > 0 {
		b := p[:n]
		if len(k.tail) > 0 {
			k.find(append(k.tail, b[:min(len(b), kvCanaryWindow)]...))
		}
		k.find(b)
		// Keep the last window of everything read (short reads add up).
		k.tail = append(k.tail, b[max(0, len(b)-kvCanaryWindow):]...)
		if over := len(k.tail) - kvCanaryWindow; over > 0 {
			k.tail = append(k.tail[:0], k.tail[over:]...)
		}
	}
	return n, err
}

// find records the value of every whole "kv_canary=<value>" in b (not
// "…_kv_canary=", not "kv_canary_sweep_interval=").
func (k *kvCanaryArg) find(b []byte) {
	for off := 0; ; {
		i := bytes.Index(b[off:], kvCanaryKey)
		if i < 0 {
			return
		}
		i += off
		off = i + len(kvCanaryKey)
		if i > 0 && (b[i-1] == '_' || b[i-1] >= 'a' && b[i-1] <= 'z' || b[i-1] >= 'A' && b[i-1] <= 'Z' || b[i-1] >= '0' && b[i-1] <= '9') {
			continue
		}
		v := b[off:]
		if len(v) > 0 && (v[0] == '\'' || v[0] == '"') {
			q := v[0]
			v = v[1:]
			j := bytes.IndexByte(v[:min(len(v), 16)], q)
			if j < 0 {
				continue // cut by the read: the window sees it whole
			}
			k.value = string(v[:j])
			continue
		}
		j := bytes.IndexAny(v[:min(len(v), 16)], ",) \n")
		if j <= 0 {
			continue
		}
		k.value = string(v[:j]) // an unquoted repr (None)
	}
}

// canaryHeadline is the report's first line, e.g.
// "LIVE-PAGE-OVERWRITE hits: 0 in 5,120 replays (live coverage 100%)".
func canaryHeadline(s *canary.Summary) string {
	cov := "live coverage not reported"
	if s.LiveCoverage != nil {
		cov = "live coverage " + canaryPercent(*s.LiveCoverage)
	}
	return fmt.Sprintf("LIVE-PAGE-OVERWRITE hits: %s in %s replays (%s)", cmdutil.Commas(s.LivePageOverwrites), cmdutil.Commas(s.Replays), cov)
}

func writeCanaryBundleText(ios *cmdutil.IOStreams, rep *CanaryReport) error {
	s := rep.Canary
	var b strings.Builder
	b.WriteString(canaryHeadline(s) + "\n")
	b.WriteString(partialText(rep.Partial))
	fmt.Fprintf(&b, "policy %s: %s pages digested, %s of the pool per replay\n",
		cmdutil.Quote(s.Policy), cmdutil.Commas(s.PagesChecked), canaryPercent(s.Coverage))
	switch {
	case s.SlotCheckedReplays == s.Replays:
		b.WriteString("expected pages checked slot by slot in every replay\n")
	case s.SlotCheckedReplays == 0:
		b.WriteString("expected pages not checked slot by slot: a stray write beside an expected store is invisible\n")
	default:
		fmt.Fprintf(&b, "expected pages checked slot by slot in %s of %s replays\n", cmdutil.Commas(s.SlotCheckedReplays), cmdutil.Commas(s.Replays))
	}
	if s.MissingStores > 0 {
		fmt.Fprintf(&b, "MISSING STORES: %s expected pages did not change\n", cmdutil.Commas(s.MissingStores))
	}
	if s.RewrittenStores > 0 {
		fmt.Fprintf(&b, "%s expected stores rewrote identical bytes (not missing)\n", cmdutil.Commas(s.RewrittenStores))
	}
	b.WriteString("\n")
	rows := [][]string{{"CLASS", "PAGES"}}
	rows = append(rows,
		[]string{"expected-store", cmdutil.Commas(s.ExpectedWrites)},
		[]string{"benign-transfer", cmdutil.Commas(s.BenignTransferWrites)},
		[]string{"free-page", cmdutil.Commas(s.FreePageWrites)},
		[]string{"held-page", cmdutil.Commas(s.HeldPageWrites)},
		[]string{"LIVE-PAGE-OVERWRITE", cmdutil.Commas(s.LivePageOverwrites)},
		[]string{"missing-store", cmdutil.Commas(s.MissingStores)},
	)
	cmdutil.WriteTable(&b, ios.IsStdoutTTY(), rows)
	writeCanarySamples(&b, ios.IsStdoutTTY(), "samples", s.Samples)
	writeCanaryBetweenText(&b, ios.IsStdoutTTY(), s)
	if s.UnknownPhase > 0 {
		fmt.Fprintf(&b, "\n%s canary.pages events with an unknown phase were not judged\n", cmdutil.Commas(s.UnknownPhase))
	}
	if s.FindingsSuppressed > 0 {
		fmt.Fprintf(&b, "\n%s further findings not emitted (per-run cap)\n", cmdutil.Commas(s.FindingsSuppressed))
	}
	_, err := fmt.Fprint(ios.Out, b.String())
	return err
}

// canaryBetweenHeadline is the between-phase headline (canary/SPEC.md §7),
// e.g. "between replays: LIVE-PAGE-OVERWRITE hits: 3 in 5,119 checks (live
// coverage 98.2%)".
func canaryBetweenHeadline(s *canary.Summary) string {
	if s.Between == nil || s.BetweenChecks == 0 {
		return `between replays: not checked (no phase "between" events): writers outside a replay were not watched`
	}
	cov := "live coverage not reported"
	if s.Between.LiveCoverage != nil {
		cov = "live coverage " + canaryPercent(*s.Between.LiveCoverage)
	}
	return fmt.Sprintf("between replays: LIVE-PAGE-OVERWRITE hits: %s in %s checks (%s)",
		cmdutil.Commas(s.Between.LivePageOverwrites), cmdutil.Commas(s.BetweenChecks), cov)
}

// writeCanaryBetweenText appends the between-phase section: its headline,
// and when there were checks, their class counts and samples.
func writeCanaryBetweenText(b *strings.Builder, tty bool, s *canary.Summary) {
	b.WriteString("\n" + canaryBetweenHeadline(s) + "\n")
	bs := s.Between
	if bs == nil || s.BetweenChecks == 0 {
		return
	}
	fmt.Fprintf(b, "policy %s: %s pages compared with the previous replay's after-snapshot, %s of the pool per check\n",
		cmdutil.Quote(bs.Policy), cmdutil.Commas(bs.PagesChecked), canaryPercent(bs.Coverage))
	switch {
	case bs.SlotCheckedChecks == s.BetweenChecks:
		b.WriteString("expected pages checked slot by slot in every check\n")
	default:
		fmt.Fprintf(b, "expected pages checked slot by slot in %s of %s checks\n", cmdutil.Commas(bs.SlotCheckedChecks), cmdutil.Commas(s.BetweenChecks))
	}
	if bs.MissingStores > 0 {
		fmt.Fprintf(b, "MISSING STORES between replays: %s expected pages did not change\n", cmdutil.Commas(bs.MissingStores))
	}
	if bs.RewrittenStores > 0 {
		fmt.Fprintf(b, "%s expected writes between replays rewrote identical bytes (not missing)\n", cmdutil.Commas(bs.RewrittenStores))
	}
	b.WriteString("\n")
	cmdutil.WriteTable(b, tty, [][]string{{"CLASS", "PAGES"},
		{"expected-store", cmdutil.Commas(bs.ExpectedWrites)},
		{"benign-transfer", cmdutil.Commas(bs.BenignTransferWrites)},
		{"free-page", cmdutil.Commas(bs.FreePageWrites)},
		{"held-page", cmdutil.Commas(bs.HeldPageWrites)},
		{"LIVE-PAGE-OVERWRITE", cmdutil.Commas(bs.LivePageOverwrites)},
		{"missing-store", cmdutil.Commas(bs.MissingStores)},
	})
	writeCanarySamples(b, tty, "samples between replays (STEP: the replay the window ends before)", bs.Samples)
}

// writeCanarySamples appends a titled sample table (nothing when empty).
func writeCanarySamples(b *strings.Builder, tty bool, title string, samples []canary.Sample) {
	if len(samples) == 0 {
		return
	}
	b.WriteString("\n" + title + "\n")
	rows := [][]string{{"STEP", "PAGE", "CLASS", "OWNER", "BEFORE", "AFTER"}}
	for _, sm := range samples {
		before, after := sm.Before.String(), sm.After.String()
		if sm.Class == canary.ClassMissingStore {
			before, after = "-", "-"
		}
		owner := sm.Owner
		if owner == "" {
			owner = "-"
		}
		rows = append(rows, []string{strconv.FormatUint(sm.Step, 10), strconv.FormatUint(uint64(sm.Page), 10),
			sm.Class, cmdutil.Quote(owner), before, after})
	}
	cmdutil.WriteTable(b, tty, rows)
}

func writeCanaryLogText(ios *cmdutil.IOStreams, scan *canary.LogScan, mode string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "SGLang kv_canary violations: %s in %s lines of %s\n", cmdutil.Commas(scan.Violations), cmdutil.Commas(uint64(scan.Lines)), cmdutil.Quote(scan.File))
	if mode != "" {
		fmt.Fprintf(&b, "SGLang ran with --kv-canary %s (server_args)\n", cmdutil.Quote(mode))
	}
	if scan.Malformed > 0 {
		fmt.Fprintf(&b, "malformed violation lines: %s (see stderr)\n", cmdutil.Commas(scan.Malformed))
	}
	if scan.Violations > 0 {
		b.WriteString("\n")
		rows := [][]string{{"FAIL_REASON", "VIOLATIONS"}}
		rows = append(rows, canaryCountRows(scan.ByReason)...)
		cmdutil.WriteTable(&b, ios.IsStdoutTTY(), rows)
		b.WriteString("\n")
		rows = [][]string{{"LAUNCH_TAG", "VIOLATIONS"}}
		rows = append(rows, canaryCountRows(scan.ByTag)...)
		cmdutil.WriteTable(&b, ios.IsStdoutTTY(), rows)
		b.WriteString("\nsamples\n")
		rows = [][]string{{"LINE", "STEP", "LAUNCH_TAG", "FAIL_REASON", "SLOT", "POSITION", "STORED_TOKEN", "EXPECTED_TOKEN", "STORED_HASH", "EXPECTED_AUX"}}
		for _, v := range scan.Samples {
			step := "-"
			if v.Step >= 0 {
				step = strconv.FormatInt(v.Step, 10)
			}
			rows = append(rows, []string{strconv.Itoa(v.Line), step, cmdutil.Quote(v.LaunchTag), v.FailReason(),
				strconv.FormatInt(v.SlotIdx, 10), strconv.FormatInt(v.Position, 10),
				strconv.FormatInt(v.StoredToken, 10), strconv.FormatInt(v.ExpectedToken, 10),
				hook.Hex64(v.StoredChainHash).String(), hook.Hex64(v.ExpectedAux).String()})
		}
		cmdutil.WriteTable(&b, ios.IsStdoutTTY(), rows)
		if scan.Truncated {
			b.WriteString("(more violations than samples kept; counts above are complete)\n")
		}
	}
	_, err := fmt.Fprint(ios.Out, b.String())
	return err
}

func canaryCountRows(m map[string]uint64) [][]string {
	keys := keysByCount(m)
	rows := make([][]string, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, []string{cmdutil.Quote(k), cmdutil.Commas(m[k])})
	}
	return rows
}

// canaryPercent formats a fraction: 1 → "100%", 0.0312 → "3.1%", tiny non-zero → "<0.1%".
func canaryPercent(f float64) string {
	switch {
	case f >= 1:
		return "100%"
	case f <= 0:
		return "0%"
	case f < 0.001:
		return "<0.1%"
	case f > 0.999:
		return ">99.9%"
	}
	s := strconv.FormatFloat(100*f, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + "%"
}
