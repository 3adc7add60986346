package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/input"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// ChecksumCompareOptions are the inputs of `kvcanary checksum compare`.
type ChecksumCompareOptions struct {
	IO              *cmdutil.IOStreams
	Ctx             context.Context // cancels reading (SIGINT, SIGTERM)
	JSON            *cmdutil.JSONFlags
	Paths           []string // inputs: bundles and/or logs, any mix of sides, hosts and ranks
	WarmupMaxSeqLen int
	Limit           int // rows of the non-matching table (text only)
}

// NewCmdChecksum builds `kvcanary checksum` and its subcommands.
func NewCmdChecksum(f *cmdutil.Factory, runF func(*ChecksumCompareOptions) error) *cobra.Command {
	return newGroupCmd(groupHelp{
		Use:   "checksum",
		Short: "Compare per-room index-K checksums across prefill and decode",
		Example: `  kvcanary checksum compare prefill.log decode.log
  kvcanary checksum compare run.kvtrace --json`,
		Long: `Per-room (bootstrap_room) index-K checksums, taken on the prefill side after the
store and on the decode side after the transfer, tell whether a PD transfer
corrupts the KV. The digests (bsum and xxh3 over the room's tokens in token
order, plus per-page digests; per layer and per TP rank for real engines)
are defined in checksum/SPEC.md.`,
	}, NewCmdChecksumCompare(f, runF))
}

// checksumCompareLong is the long help of `kvcanary checksum compare`.
const checksumCompareLong = `Match room checksums by room and classify every room: match, mismatch,
warmup (seq_len at or below --warmup-max-seqlen, or every decode digest 0,
meaning not transferred), missing-decode, missing-prefill, or duplicate (one
producer reported the room twice with different digests).

Inputs are trace bundles (recognized by the zstd magic; room.checksum events)
or text logs holding kvcanary's room_checksum lines after any prefix, in
decimal or 0x-hex, and SGLang's "KV checksum mismatch" aborts. Give any number
of inputs, in any order: the prefill host's and the decode host's bundles,
one log per rank, or one bundle holding both sides. Records say their side.
Inputs are streamed; memory is about 40 bytes per record. When mismatching
rooms carry layer or page digests, the inputs are read a second time to name
the layers and pages.

Several records per side (checksum/SPEC.md §9): a record is identified by its
side, attention-TP rank, stage (sent on prefill; transferred and admitted on
decode) and host. Index-K is replicated across ranks, so every record of a
room must agree: any prefill rank must match every decode rank, and ranks are
never duplicates of each other. A mismatch names the disagreeing records
against a reference (the prefill record most other prefill records agree
with), the layers whose digests differ, and the page-table entries with the
tokens they hold — from page_xxh3 when both records carry it, else from
page_bsum. An xxh3 of 0 means "not computed" (GPU hooks compute bsum only)
and is compared with nothing. A decode copy that matches when it landed
(transferred) but not when admitted was changed on the decode host.

No data: an input that reads fine but holds no room checksum record (a bundle
recorded without the checksum instrument, such as a repro bundle of sessions
only, or a log without room_checksum lines) is not a verdict. The report says
so in one sentence naming what produces them (kvcanary wrap, the twin's
sim run --record, or the engine's kvcanary room_checksum lines), --json prints
{"status": "no-data", "message": …}, and the exit code is 4.

Partial: a room seen on one side only (missing-decode, missing-prefill) was
not compared: it is neither clean nor dirty. When such rooms exist, or a
bundle's producers reported, in their run.end events, that they lost checksum
evidence (records skipped, events dropped, instrument errors), the report
names what was not compared in a line starting "PARTIAL:", --json carries
"status": "partial", "partial": [reasons] and "coverage" (every producer that
lost something), and the exit code is 4 unless a room mismatched (1).

Exit codes: 0 every room outside warmups matches and nothing was reported
lost, 1 a mismatch or a duplicate, 2 usage, 3 unreadable, empty or malformed
input (a bad digest names file:line), 4 no data, or partial (rooms missing a
side, evidence lost) without a mismatch, 130 interrupted.`

// NewCmdChecksumCompare builds `kvcanary checksum compare`.
func NewCmdChecksumCompare(f *cmdutil.Factory, runF func(*ChecksumCompareOptions) error) *cobra.Command {
	opts := &ChecksumCompareOptions{IO: f.IO, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "compare INPUT...",
		Short: "Match prefill and decode room checksums and classify every room",
		Long:  checksumCompareLong,
		Example: `  # The seeds' case: one prefill log, one decode log
  kvcanary checksum compare prefill.log decode.log

  # Two hosts, each recorded with kvcanary wrap (several TP ranks per host)
  kvcanary checksum compare prefill-host.kvtrace decode-host.kvtrace

  # One log per rank; lines carry rank= and stage=
  kvcanary checksum compare prefill-tp*.log decode-tp*.log

  # Which ranks, layers and pages disagree, for scripts
  kvcanary checksum compare p.kvtrace d.kvtrace --json | jq '.non_matching[] | {room, mismatch_layers, mismatch_pages, bad: [.records[]? | select(.agrees|not) | {side, rank, stage, node}]}'`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			if opts.WarmupMaxSeqLen < 0 {
				return cmdutil.UsageError("--warmup-max-seqlen %d: want 0 or more", opts.WarmupMaxSeqLen)
			}
			return runOr(opts, runF, checksumCompareRun)
		},
	}
	cmd.Flags().IntVar(&opts.WarmupMaxSeqLen, "warmup-max-seqlen", checksum.DefaultWarmupMaxSeqLen, "rooms with seq_len at or below this are warmups (0: no seq_len rule)")
	cmdutil.AddLimitFlag(cmd, &opts.Limit, 50, 0, "rows of the non-matching table to print, 0 all (--json lists all)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

// bundleStream keeps what its reader had to skip in info when it closes.
type bundleStream struct {
	*traces.Reader
	info *bundleInfo
}

// Next passes the reader's events on, and their run.end events to the
// bundle's coverage collector, when it has one.
func (b bundleStream) Next() (hook.Event, error) {
	ev, err := b.Reader.Next()
	if err == nil && b.info.cov != nil && !b.info.covRead {
		b.info.cov.Observe(ev)
	}
	return ev, err
}

func (b bundleStream) Close() error {
	cov := b.info.cov
	*b.info = damageOf(b.Reader)
	b.info.cov, b.info.covRead = cov, cov != nil
	return b.Reader.Close()
}

// ChecksumCompareReport is the --json shape of `kvcanary checksum compare`:
// checksum.Report's fields, and when the verdict is partial, why.
type ChecksumCompareReport struct {
	*checksum.Report
	// Status "partial" when no room mismatched but some were not compared:
	// rooms seen on one side only, or producers that reported lost checksum
	// evidence in their run.end events (Partial says which; Coverage lists
	// every producer that lost something).
	Status   string              `json:"status,omitempty"`
	Partial  []string            `json:"partial,omitempty"`
	Coverage *analyzers.Coverage `json:"coverage,omitempty"`
}

// checksumPartial is what a comparison could not judge: rooms seen on one
// side only, and what the bundles' producers said they lost.
func checksumPartial(rep *checksum.Report, cov *analyzers.Coverage) []string {
	var out []string
	if n := rep.Classes.MissingDecode + rep.Classes.MissingPrefill; n > 0 {
		out = append(out, fmt.Sprintf("%s seen on one side only (%d missing-decode, %d missing-prefill): not compared, neither clean nor dirty",
			plural(int64(n), "room"), rep.Classes.MissingDecode, rep.Classes.MissingPrefill))
	}
	if cov != nil {
		out = append(out, cov.Lost(checksum.AnalyzerName)...)
	}
	return out
}

// checksumDirty reports whether the comparison found corruption: a mismatch,
// a duplicate, or a mismatch report naming no room. A room missing a side is
// unmeasured (partial), not dirty.
func checksumDirty(rep *checksum.Report) bool {
	return rep.Classes.Mismatch+rep.Classes.Duplicate > 0 || len(rep.Unattributed) > 0
}

func checksumCompareRun(opts *ChecksumCompareOptions) error {
	if err := input.CheckDistinct(opts.Paths); err != nil {
		return cmdutil.InputError(err)
	}
	var srcs []checksum.Source
	bundles := map[string]*bundleInfo{}
	for _, p := range opts.Paths {
		info := &bundleInfo{cov: analyzers.NewCoverageCollector()}
		src, err := checksumInput(opts.Ctx, p, info)
		if err != nil {
			return err
		}
		if _, isLog := src.(*checksumLog); !isLog {
			bundles[p] = info
		}
		srcs = append(srcs, &statSource{Source: src})
	}
	warm := opts.WarmupMaxSeqLen
	if warm == 0 {
		warm = -1 // the flag's 0 turns the seq_len rule off; Options' 0 means the default
	}
	rep, err := checksum.Compare(checksum.Options{WarmupMaxSeqLen: warm}, srcs...)
	if errors.Is(err, checksum.ErrNoRecords) {
		if nd := checksumNoData(srcs); nd != nil {
			return writeNoData(opts.IO.Out, opts.JSON.JSON, nd)
		}
	}
	if err != nil {
		for _, src := range srcs {
			if st := src.(*statSource).last; errors.Is(err, checksum.ErrNoRecords) && st.Records+st.Evidence == 0 && st.Malformed > 0 {
				err = fmt.Errorf("%w; %s, first: %s", err, plural(st.Malformed, "malformed checksum record"), cmdutil.Quote(st.FirstReason))
				break
			}
		}
		return cmdutil.InputError(err)
	}
	if warm < 0 {
		rep.WarmupMaxSeqLen = 0
	}
	out := ChecksumCompareReport{Report: rep}
	var cov *analyzers.Coverage
	for _, p := range opts.Paths {
		if b := bundles[p]; b != nil && b.cov != nil {
			if cov == nil {
				cov = &analyzers.Coverage{}
			}
			cov.Merge(b.cov.Result())
		}
	}
	if out.Partial = checksumPartial(rep, cov); len(out.Partial) > 0 {
		out.Status = StatusPartial
		if cov != nil && (cov.Lossy > 0 || len(cov.Shortfalls()) > 0) {
			out.Coverage = cov
		}
	}
	if err := writeJSONOr(opts.IO.Out, opts.JSON.JSON, out, func() error { return writeChecksumText(opts, &out) }); err != nil {
		return err
	}
	writeChecksumNotes(opts.IO.ErrOut, rep, bundles)
	if checksumDirty(rep) {
		return cmdutil.FindingError
	}
	if out.Status == StatusPartial {
		return PartialError
	}
	return nil
}

// statSource keeps what its last read of the input found.
type statSource struct {
	checksum.Source
	read bool
	last checksum.InputStats
}

func (s *statSource) Each(fn func(*checksum.Record) error) (checksum.InputStats, error) {
	st, err := s.Source.Each(fn)
	s.read, s.last = true, st
	return st, err
}

// checksumNoData is the no-data report of the first input that was read
// and held no room checksum record (checksum.Compare stops there with
// ErrNoRecords); nil when there is none.
func checksumNoData(srcs []checksum.Source) *cmdutil.NoData {
	for _, src := range srcs {
		s := src.(*statSource)
		if !s.read || s.last.Records+s.last.Evidence > 0 {
			continue
		}
		if s.last.Malformed > 0 {
			return nil // records it could not read: an input error, not an absence
		}
		if s.last.Format == "log" {
			return cmdutil.NewNoData(cmdutil.InstrumentChecksum, s.Name(), uint64(max(s.last.Lines, 0)), "line")
		}
		return cmdutil.NewNoData(cmdutil.InstrumentChecksum, s.Name(), uint64(max(s.last.Events, 0)), "event")
	}
	return nil
}

func joinLines(ls []int64, total int64) string {
	var s []string
	for _, l := range ls {
		s = append(s, strconv.FormatInt(l, 10))
	}
	if total > int64(len(ls)) {
		s = append(s, "…")
	}
	return strings.Join(s, ", ")
}

// writeChecksumNotes reports on stderr what the inputs held besides records.
func writeChecksumNotes(w io.Writer, rep *checksum.Report, bundles map[string]*bundleInfo) {
	for _, in := range rep.Inputs {
		name := cmdutil.Quote(in.Name)
		unit := "line"
		if in.Format != "log" {
			unit = "event"
		}
		if in.Skipped > 0 {
			fmt.Fprintf(w, "kvcanary: %s: skipped %s without a checksum record (%s %s)\n",
				name, plural(in.Skipped, unit), units(int64(len(in.SkippedLines)), unit), joinLines(in.SkippedLines, in.Skipped))
		}
		if in.Malformed > 0 {
			fmt.Fprintf(w, "kvcanary: %s: skipped %s (%s %s); first: %s\n",
				name, plural(in.Malformed, "malformed checksum record"), units(int64(len(in.MalformedLines)), unit),
				joinLines(in.MalformedLines, in.Malformed), cmdutil.Quote(in.FirstReason))
		}
		if b := bundles[in.Name]; b != nil {
			b.warn(w, in.Name)
		}
	}
	if rep.IdenticalRepeats > 0 {
		fmt.Fprintf(w, "kvcanary: %d records repeated a room's digests exactly and were counted once\n", rep.IdenticalRepeats)
	}
	if n := len(rep.Unattributed); n > 0 {
		var ws []string
		for i, u := range rep.Unattributed {
			if i == 5 {
				ws = append(ws, "…")
				break
			}
			ws = append(ws, u.Where)
		}
		fmt.Fprintf(w, "kvcanary: %d KV checksum mismatch reports name no room (%s)\n", n, strings.Join(ws, ", "))
	}
}

// writeChecksumText prints the headline, the table of the first --limit
// non-matching rooms and, when the records name their producers, the
// per-producer table (rendered by checksum.Report).
func writeChecksumText(opts *ChecksumCompareOptions, cr *ChecksumCompareReport) error {
	rep := cr.Report
	out, tty := opts.IO.Out, opts.IO.IsStdoutTTY()
	if _, err := fmt.Fprint(out, rep.Headline()+"\n"+partialText(cr.Partial)); err != nil {
		return err
	}
	if len(rep.NonMatching) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	limit := opts.Limit
	if limit <= 0 {
		limit = len(rep.NonMatching)
	}
	if err := cmdutil.WriteTable(out, tty, rep.NonMatchingTable(limit)); err != nil {
		return err
	}
	if n := len(rep.NonMatching); n > limit {
		fmt.Fprintf(out, "… %d more non-matching rooms (--limit 0 or --json lists all)\n", n-limit)
	}
	if !rep.NamedProducers() {
		return nil
	}
	fmt.Fprintln(out)
	return cmdutil.WriteTable(out, tty, rep.ProducerTable())
}
