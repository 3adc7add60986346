package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/input"
	"github.com/kvcanary/kvcanary/runtime/logscan"
)

// NewCmdLogs builds `kvcanary logs` and its subcommands.
func NewCmdLogs(f *cmdutil.Factory) *cobra.Command {
	return newGroupCmd(groupHelp{Use: "logs", Short: "Read serving engines' server logs (SGLang, vLLM)",
		Example: `  kvcanary logs scan decode.log
  kvcanary logs scan --json prefill.log`}, NewCmdLogsScan(f, nil))
}

// LogsScanOptions are the inputs of `kvcanary logs scan`.
type LogsScanOptions struct {
	IO   *cmdutil.IOStreams
	Ctx  context.Context // cancels reading (SIGINT, SIGTERM)
	JSON *cmdutil.JSONFlags
	Now  func() time.Time

	Path  string // "-" reads stdin
	Year  int    // year for vLLM timestamps; 0 means the current year
	TZ    string // zone of the log's timestamps
	Limit int    // retractions and raw lines printed in the text report
}

// NewCmdLogsScan builds `kvcanary logs scan FILE`.
func NewCmdLogsScan(f *cmdutil.Factory, runF func(*LogsScanOptions) error) *cobra.Command {
	opts := &LogsScanOptions{IO: f.IO, Now: f.Now, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "scan FILE",
		Short: "Summarise a server log: batches, peak load, retractions, canary violations, PD failures",
		Long: `Summarise an SGLang or vLLM server log (FILE, or - for stdin): decode and
prefill batches, peak #running-req and token usage, retractions with their
timestamps, kv_canary violations, KV checksum mismatches and vLLM preemptions.

SGLang PD disaggregation: "Prefill/Decode transfer failed for request" lines
(transfer_failures, by side, and the distinct rooms: every TP rank logs the
same failure) and "Context corruption detected: … Metadata buffer index"
lines (metadata_corruptions: a request that received another room's
metadata), each listed with its rid and bootstrap rooms; the decode lines'
queue fields (#prealloc-req, #transfer-req, #retracted-req, pre-allocated
usage) as peaks, and speculative decoding's accept len and accept rate as
averages and minimums. A section whose fields no line carried is left out
(--json: pd_decode, speculative absent), not shown as zero.

For vLLM logs, decode_batches counts the periodic "Engine NNN: Avg prompt
throughput: …" lines and token usage is the GPU KV cache usage as a fraction.
Lines in formats the scanner does not know are counted as unrecognized, never
fatal. Timestamps are read in --tz: by default this machine's local time,
since SGLang logs local time (the report states the zone, and every time it
prints carries its offset); give the server's zone when the log comes from
another machine. vLLM prints no year, so --year supplies it (default: this
year).

This is a summary, not a check: it exits 0 whatever the log holds (use
"kvcanary canary report LOG" to judge canary violations). It exits 3 when FILE
cannot be read or is not a text log (empty, gzip- or zstd-compressed, binary:
the message says which), and 130 when interrupted. A line longer than 1 MiB
is parsed by its first MiB (as canary report does) and counted in long_lines.`,
		Example: `  kvcanary logs scan decode.log
  journalctl -u sglang-decode | kvcanary logs scan - --json | jq .retraction_events`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Path = args[0]
			if opts.Year < 0 || opts.Year > 9999 {
				return cmdutil.UsageError("--year %d: want a year from 1 to 9999 (0: the current year)", opts.Year)
			}
			return runOr(opts, runF, logsScanRun)
		},
	}
	cmd.Flags().IntVar(&opts.Year, "year", 0, "year of vLLM timestamps, which print none (default: the current year)")
	cmd.Flags().StringVar(&opts.TZ, "tz", "Local", "time `ZONE` the log's timestamps are in: an IANA name (Europe/Berlin), UTC, Local, or an offset (+02:00)")
	cmdutil.AddLimitFlag(cmd, &opts.Limit, 10, 0, "retractions and raw lines listed in the text report, 0 all that are kept")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func logsScanRun(opts *LogsScanOptions) error {
	loc, err := logscan.ParseZone(opts.TZ)
	if err != nil {
		return cmdutil.UsageError("--tz: %w", err)
	}
	zone := logscan.DescribeZone(loc, opts.Now())
	year := opts.Year
	if year == 0 {
		year = opts.Now().Year()
	}
	var in *input.File
	name := opts.Path
	if opts.Path == "-" {
		name = "stdin"
		if in, err = input.NewFile(orBackground(opts.Ctx), opts.IO.In, name); err != nil {
			return cmdutil.InputError(err)
		}
		if err := in.Expect(wantLog, input.Text); err != nil {
			return cmdutil.InputError(err)
		}
	} else if in, err = openInput(opts.Ctx, opts.Path, wantLog, input.Text); err != nil {
		return err
	}
	defer in.Close()
	var r io.Reader = in
	sum, err := logscan.ScanAll(r, name, logscan.Options{Year: year, Location: loc})
	if err != nil {
		return cmdutil.InputError(err)
	}
	if opts.JSON.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, struct {
			*logscan.Summary
			TimeZone string `json:"time_zone"` // the zone timestamps were read in, stated
		}{sum, zone})
	}
	limit := opts.Limit
	if limit == 0 {
		limit = math.MaxInt // all, as in checksum compare
	}
	if err := writeLogSummary(opts.IO.Out, name, sum, limit); err != nil {
		return err
	}
	_, err = fmt.Fprintf(opts.IO.Out, "%-20s %s (--tz)\n", "timestamps read in", zone)
	return err
}

func writeLogSummary(w io.Writer, name string, s *logscan.Summary, limit int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s log, %d lines (%d unrecognized, %d blank", cmdutil.Quote(name), s.Format, s.Lines, s.Unrecognized, s.Blank)
	if s.LongLines > 0 {
		fmt.Fprintf(&b, ", %d over-long", s.LongLines)
	}
	b.WriteString(")")
	if s.Start != "" {
		fmt.Fprintf(&b, ", %s .. %s", s.Start, s.End)
	}
	b.WriteString("\n")
	batches := "decode batches"
	if s.Format == "vllm" {
		batches = "engine stat lines"
	}
	vllm := s.Format == "vllm"
	fmt.Fprintf(&b, "%-20s %d (peak #running-req %d, peak token usage %.2f, peak #queue-req %d",
		batches, s.DecodeBatches, s.PeakRunningReq, s.PeakTokenUsage, s.PeakQueueReq)
	if !vllm {
		fmt.Fprintf(&b, ", cuda graph on %d", s.CUDAGraphBatches)
	}
	b.WriteString(")\n")
	if !vllm {
		fmt.Fprintf(&b, "%-20s %d\n", "prefill batches", s.PrefillBatches)
		fmt.Fprintf(&b, "%-20s %d %s, %d requests retracted\n", "retractions", s.RetractionEvents, units(s.RetractionEvents, "event"), s.RetractedReqs)
	}
	for i, r := range s.Retractions {
		if listCut(&b, i, limit, s.RetractionEvents, logscan.MaxRetractions) {
			break
		}
		fmt.Fprintf(&b, "  line %-7d %s  retracted %d (token usage %.2f, #running-req %d, new_token_ratio %.4f -> %.4f)\n",
			r.Line, orNoTime(r.Time), r.Retracted, r.TokenUsage, r.RunningReq, r.NewTokenRatio[0], r.NewTokenRatio[1])
	}
	fmt.Fprintf(&b, "%-20s %d\n", "canary violations", s.CanaryViolations)
	writeSamples(&b, s.CanaryLines, limit)
	fmt.Fprintf(&b, "%-20s %d\n", "checksum mismatches", s.ChecksumMismatches)
	writeSamples(&b, s.ChecksumLines, limit)
	fmt.Fprintf(&b, "%-20s %d\n", "preemptions", s.Preemptions)
	writeSamples(&b, s.PreemptionLines, limit)
	if !vllm {
		writePDSummary(&b, s, limit)
	}
	if s.BadFields > 0 {
		fmt.Fprintf(&b, "%-20s %d values did not parse on recognized lines\n", "bad fields", s.BadFields)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeSamples(b *strings.Builder, samples []logscan.Sample, limit int) {
	for i, s := range samples {
		if i >= limit {
			break
		}
		fmt.Fprintf(b, "  line %-7d %s\n", s.Line, cmdutil.Quote(s.Text))
	}
}

// writePDSummary appends SGLang's PD failures (with their rooms), the PD
// decode queue peaks and the speculative acceptance, when measured.
func writePDSummary(b *strings.Builder, s *logscan.Summary, limit int) {
	fmt.Fprintf(b, "%-20s %d (%d decode, %d prefill) over %d %s\n", "transfer failures", s.TransferFailures,
		s.DecodeTransferFailures, s.PrefillTransferFailures, s.TransferFailedRooms, units(s.TransferFailedRooms, "room"))
	for i, f := range s.TransferFailureLines {
		if listCut(b, i, limit, s.TransferFailures, logscan.MaxPDFailures) {
			break
		}
		fmt.Fprintf(b, "  line %-7d %s  %s rank %s rid %s room %d", f.Line, orNoTime(f.Time), f.Side, orUnknown(f.Rank), cmdutil.Quote(f.Rid), uint64(f.Room))
		if f.Reason != "" {
			fmt.Fprintf(b, ": %s", cmdutil.Quote(f.Reason))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "%-20s %d over %d %s\n", "metadata corruptions", s.MetadataCorruptions, s.MetadataCorruptedRooms, units(s.MetadataCorruptedRooms, "room"))
	for i, m := range s.MetadataCorruptionLines {
		if listCut(b, i, limit, s.MetadataCorruptions, logscan.MaxPDFailures) {
			break
		}
		fmt.Fprintf(b, "  line %-7d %s  rid %s room %d received room %d's metadata (buffer index %s)\n",
			m.Line, orNoTime(m.Time), cmdutil.Quote(m.Rid), uint64(m.Room), uint64(m.FromRoom), orUnknown(m.BufferIndex))
	}
	if s.RoomsCapped {
		fmt.Fprintf(b, "  (more than %d distinct rooms: room counts are lower bounds)\n", logscan.MaxRooms)
	}
	if p := s.PD; p != nil {
		fmt.Fprintf(b, "%-20s %s: peak #prealloc-req %d, peak #transfer-req %d, peak #retracted-req %d, peak pre-allocated usage %.2f\n",
			"pd decode queues", plural(p.Batches, "decode line"), p.PeakPreallocReq, p.PeakTransferReq, p.PeakRetractedReq, p.PeakPreallocUsage)
	}
	if sp := s.Speculative; sp != nil {
		fmt.Fprintf(b, "%-20s %s: accept len avg %.2f (min %.2f), accept rate avg %.2f (min %.2f)\n",
			"speculative", plural(sp.Batches, "decode line"), sp.AvgAcceptLen, sp.MinAcceptLen, sp.AvgAcceptRate, sp.MinAcceptRate)
	}
}

// listCut ends a list cut to limit rows: at row i == limit it writes how many
// of total were left out (--json lists up to jsonMax) and says true.
func listCut(b *strings.Builder, i, limit int, total int64, jsonMax int) bool {
	if i < limit {
		return false
	}
	fmt.Fprintf(b, "  … %d more (--json lists up to %d)\n", total-int64(limit), jsonMax)
	return true
}

// orUnknown is n, or "?" when the line did not state it (-1).
func orUnknown(n int) string {
	if n < 0 {
		return "?"
	}
	return fmt.Sprint(n)
}

func orNoTime(t string) string {
	if t == "" {
		return "(no timestamp)"
	}
	return t
}
