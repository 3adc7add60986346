package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/zeebo/xxh3"

	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// ChecksumCompareOptions are the inputs of `kvcanary checksum compare`.
type ChecksumCompareOptions struct {
	IO              *cmdutil.IOStreams
	Ctx             context.Context // cancels reading (SIGINT, SIGTERM)
	JSON            *cmdutil.JSONFlags
	Paths           []string // PREFILL DECODE, or one input holding both sides
	WarmupMaxSeqLen int
	Limit           int // rows of the non-matching table (text only)
}

// NewCmdChecksum builds `kvcanary checksum` and its subcommands.
func NewCmdChecksum(f *cmdutil.Factory, runF func(*ChecksumCompareOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checksum",
		Short: "Compare per-room index-K checksums across prefill and decode",
		Long: `Per-room (bootstrap_room) index-K checksums, taken on the prefill side after the
store and on the decode side after the transfer, tell whether a PD transfer
corrupts the KV. The digests (bsum and xxh3 over the room's tokens in token
order, plus per-page digests) are defined in checksum/SPEC.md.`,
		Args: usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(NewCmdChecksumCompare(f, runF))
	return cmd
}

// NewCmdChecksumCompare builds `kvcanary checksum compare`.
func NewCmdChecksumCompare(f *cmdutil.Factory, runF func(*ChecksumCompareOptions) error) *cobra.Command {
	opts := &ChecksumCompareOptions{IO: f.IO, Ctx: f.Ctx}
	cmd := &cobra.Command{
		Use:   "compare PREFILL DECODE | compare BUNDLE",
		Short: "Match prefill and decode room checksums and classify every room",
		Long: `Match room checksums by room and classify every room: match, mismatch,
warmup (seq_len at or below --warmup-max-seqlen, or a decode digest of 0,
meaning not transferred), missing-decode, missing-prefill, or duplicate (a room
seen twice on one side with different digests).

Inputs are trace bundles (recognized by the zstd magic; room.checksum events)
or text logs holding kvcanary's room_checksum lines after any prefix, in
decimal or 0x-hex, and SGLang's "KV checksum mismatch" aborts. Give the
prefill and the decode input, or one input that holds both sides. Inputs are
streamed; memory is about 32 bytes per room and side. When mismatching rooms
carry per-page digests, the inputs are read a second time to name the pages.

Exit codes: 0 every room outside warmups matches, 1 a mismatch, a missing side
or a duplicate, 2 usage, 3 unreadable, empty or malformed input (a bad digest
names file:line).`,
		Args: usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			if opts.WarmupMaxSeqLen < 0 {
				return cmdutil.UsageError("--warmup-max-seqlen %d: want 0 or more", opts.WarmupMaxSeqLen)
			}
			if opts.Limit < 0 {
				return cmdutil.UsageError("--limit %d: want 0 or more (0: all rows)", opts.Limit)
			}
			if runF != nil {
				return runF(opts)
			}
			return checksumCompareRun(opts)
		},
	}
	cmd.Flags().IntVar(&opts.WarmupMaxSeqLen, "warmup-max-seqlen", checksum.DefaultWarmupMaxSeqLen, "rooms with seq_len at or below this are warmups (0: no seq_len rule)")
	cmd.Flags().IntVar(&opts.Limit, "limit", 50, "rows of the non-matching table to print (--json lists all)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

// bundleInfo is what a bundle reader had to skip, kept when its stream closes.
type bundleInfo struct {
	skipped   uint64
	skips     []traces.Skip
	truncated bool
	reason    string
}

type bundleStream struct {
	*traces.Reader
	info *bundleInfo
}

func (b bundleStream) Close() error {
	b.info.skipped, b.info.skips = b.Skipped(), b.Skips()
	b.info.truncated = b.Truncated()
	b.info.reason = b.TruncationReason()
	return b.Reader.Close()
}

func checksumCompareRun(opts *ChecksumCompareOptions) error {
	if len(opts.Paths) == 2 {
		if err := checkDistinctInputs(opts.Paths[0], opts.Paths[1]); err != nil {
			return cmdutil.InputError(err)
		}
	}
	var srcs []checksum.Source
	bundles := map[string]*bundleInfo{}
	for _, p := range opts.Paths {
		info := &bundleInfo{}
		src, err := checksumInput(opts.Ctx, p, info)
		if err != nil {
			return err
		}
		if _, isLog := src.(*checksumLog); !isLog {
			bundles[p] = info
		}
		srcs = append(srcs, src)
	}
	warm := opts.WarmupMaxSeqLen
	if warm == 0 {
		warm = -1 // the flag's 0 turns the seq_len rule off; Options' 0 means the default
	}
	rep, err := checksum.Compare(checksum.Options{WarmupMaxSeqLen: warm}, srcs...)
	if err != nil {
		return cmdutil.InputError(err)
	}
	if warm < 0 {
		rep.WarmupMaxSeqLen = 0
	}
	if opts.JSON.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, rep); err != nil {
			return err
		}
	} else if err := writeChecksumText(opts, rep); err != nil {
		return err
	}
	writeChecksumNotes(opts.IO.ErrOut, rep, bundles)
	if rep.Failed() {
		return cmdutil.FindingError
	}
	return nil
}

// checkDistinctInputs rejects the same file passed as both sides: the same
// path, the same inode (hard link, symlink) or the same content.
func checkDistinctInputs(a, b string) error {
	aa, _ := filepath.Abs(a)
	ab, _ := filepath.Abs(b)
	if aa == ab {
		return fmt.Errorf("prefill and decode are the same file %s: pass the other side's input", cmdutil.Quote(a))
	}
	sa, err := os.Stat(a)
	if err != nil {
		return fmt.Errorf("open input: %w", err)
	}
	sb, err := os.Stat(b)
	if err != nil {
		return fmt.Errorf("open input: %w", err)
	}
	if os.SameFile(sa, sb) {
		return fmt.Errorf("prefill %s and decode %s are the same file", cmdutil.Quote(a), cmdutil.Quote(b))
	}
	if sa.Size() == sb.Size() && sa.Size() > 0 && sa.Mode().IsRegular() && sb.Mode().IsRegular() {
		ha, err := hashFile(a)
		if err != nil {
			return err
		}
		hb, err := hashFile(b)
		if err != nil {
			return err
		}
		if ha == hb {
			return fmt.Errorf("prefill %s and decode %s have identical content: one file was passed twice", cmdutil.Quote(a), cmdutil.Quote(b))
		}
	}
	return nil
}

func hashFile(p string) (uint64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("open input: %w", err)
	}
	defer f.Close()
	h := xxh3.New()
	if _, err := io.Copy(h, f); err != nil {
		return 0, fmt.Errorf("read %s: %w", p, err)
	}
	return h.Sum64(), nil
}

func writeChecksumText(opts *ChecksumCompareOptions, rep *checksum.Report) error {
	out := opts.IO.Out
	if _, err := fmt.Fprintln(out, rep.Headline()); err != nil {
		return err
	}
	if len(rep.NonMatching) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	rows := [][]string{{"ROOM", "CLASS", "SEQ_LEN", "PREFILL BSUM", "PREFILL XXH3", "DECODE BSUM", "DECODE XXH3", "PAGES", "REASON"}}
	limit := opts.Limit
	if limit <= 0 {
		limit = len(rep.NonMatching)
	}
	for i, rr := range rep.NonMatching {
		if i == limit {
			break
		}
		room := strconv.FormatUint(uint64(rr.Room), 10)
		seq := strconv.Itoa(rr.SeqLen)
		if rr.Prefill != nil && rr.Decode != nil && rr.Prefill.SeqLen != rr.Decode.SeqLen {
			seq = fmt.Sprintf("%d/%d", rr.Prefill.SeqLen, rr.Decode.SeqLen)
		}
		reason := rr.Reason
		if len(rr.Evidence) > 0 {
			reason += " (" + cmdutil.Quote(strings.Join(rr.Evidence, ", ")) + ")"
		}
		if rr.Class == checksum.ClassDuplicate || len(rr.Duplicates) > 0 {
			for _, d := range rr.Duplicates {
				pb, px, db, dx := "-", "-", "-", "-"
				if d.Side == hook.SidePrefill {
					pb, px = d.Bsum.String(), d.XXH3.String()
				} else {
					db, dx = d.Bsum.String(), d.XXH3.String()
				}
				rows = append(rows, []string{room, fmt.Sprintf("%s (%s)", rr.Class, d.Side), strconv.Itoa(d.SeqLen), pb, px, db, dx, "-", reason})
			}
			continue
		}
		pb, px, db, dx := "-", "-", "-", "-"
		if rr.Prefill != nil {
			pb, px = rr.Prefill.Bsum.String(), rr.Prefill.XXH3.String()
		}
		if rr.Decode != nil {
			db, dx = rr.Decode.Bsum.String(), rr.Decode.XXH3.String()
		}
		pages := "-"
		if len(rr.MismatchPages) > 0 {
			var ts []string
			for _, t := range rr.MismatchTokens {
				ts = append(ts, fmt.Sprintf("%d-%d", t.Lo, t.Hi))
			}
			pages = intRanges(rr.MismatchPages) + " (tokens " + strings.Join(ts, ",") + ")"
		}
		rows = append(rows, []string{room, rr.Class, seq, pb, px, db, dx, pages, reason})
	}
	if err := cmdutil.WriteTable(out, opts.IO.IsStdoutTTY(), rows); err != nil {
		return err
	}
	if n := len(rep.NonMatching); n > limit {
		fmt.Fprintf(out, "… %d more non-matching rooms (--limit 0 or --json lists all)\n", n-limit)
	}
	return nil
}

// intRanges renders sorted ints as ranges: [1 2 3 7] → "1-3,7".
func intRanges(xs []int) string {
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", xs[i], xs[j]))
		} else {
			parts = append(parts, strconv.Itoa(xs[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
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
			warnBundle(w, in.Name, b.truncated, b.reason, b.skipped, b.skips)
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
