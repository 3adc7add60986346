package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// reportMaxFindings bounds the findings a report (canary, graphdiff) lists;
// its FindingsTotal counts all.
const reportMaxFindings = 100

// bundleReplay is what replaying a bundle through one analyzer read and found.
type bundleReplay struct {
	events        uint64
	kinds         [256]uint64 // events per kind
	findings      []*hook.Finding
	findingsTotal int
	coverage      analyzers.Coverage // what the producers said they lost (run.end)

	bundleInfo // what the reader had to skip
}

// replayBundle feeds the bundle at path through an, as a report command
// judges a recorded run afresh: first a run.start made from the manifest's
// run configuration (so a bundle that lost its run.start is still judged with
// its flags; a run.start in the stream overrides it), then every event except
// the findings recorded at run time, which an recomputes. It keeps the first
// maxFindings findings an emits and counts all of them. Errors are input
// errors naming the file (exit 130 when reading was interrupted).
func replayBundle(r *bundleFile, an hook.Analyzer, maxFindings int) (*bundleReplay, error) {
	rep := &bundleReplay{}
	cov := analyzers.NewCoverageCollector()
	emit := func(ev hook.Event) {
		fd, ok := ev.Body.(*hook.Finding)
		if !ok {
			return
		}
		rep.findingsTotal++
		if len(rep.findings) < maxFindings {
			rep.findings = append(rep.findings, fd)
		}
	}
	if m := r.Manifest(); m.Config.Engine != "" || m.Config.Sessions > 0 || m.Config.CUDAGraph != nil {
		an.Observe(hook.Event{Kind: hook.KindRunStart, Body: &hook.RunStart{Config: m.Config}}, emit)
	}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, cmdutil.InputError(err) // the reader's error names the file and byte
		}
		rep.events++
		rep.kinds[ev.Kind]++
		cov.Observe(ev)
		if ev.Kind == hook.KindFinding {
			continue
		}
		an.Observe(ev, emit)
	}
	rep.bundleInfo = damageOf(r.Reader)
	rep.coverage = cov.Result()
	return rep, nil
}

// bundleInfo is what a bundle reader had to skip or could not read.
type bundleInfo struct {
	skipped   uint64
	skips     []traces.Skip
	truncated bool
	reason    string
	// cov, when set, collects the bundle's run.end events as it is read
	// (checksum compare's bundles; replayBundle keeps its own).
	cov *analyzers.CoverageCollector
	// covRead: the bundle was read once; a second pass (checksum compare
	// locating pages) must not count its events again.
	covRead bool
}

// damageOf is what r had to skip so far (all of it once r is read to its end).
func damageOf(r *traces.Reader) bundleInfo {
	return bundleInfo{skipped: r.Skipped(), skips: r.Skips(), truncated: r.Truncated(), reason: r.TruncationReason()}
}

// BundleDamage is the --json shape of what a report's bundle reader had to
// skip, beside the counts of what it read.
type BundleDamage struct {
	Skipped   uint64 `json:"skipped"`
	Truncated bool   `json:"truncated"`
	Reason    string `json:"truncation_reason,omitempty"`
}

func (b bundleInfo) damage() BundleDamage {
	return BundleDamage{Skipped: b.skipped, Truncated: b.truncated, Reason: b.reason}
}

// warn reports on stderr what of the bundle could not be used.
func (b bundleInfo) warn(w io.Writer, path string) {
	warnBundle(w, path, b.truncated, b.reason, b.skipped, b.skips)
}

// noData is the report of a bundle without a single event of inst's: the
// bundle's warnings, then the no-data message (detail says why, when known).
func (b *bundleReplay) noData(ios *cmdutil.IOStreams, asJSON bool, path string, inst cmdutil.Instrument, detail string) error {
	b.warn(ios.ErrOut, path)
	nd := cmdutil.NewNoData(inst, path, b.events, "event")
	nd.Detail = detail
	return writeNoData(ios.Out, asJSON, nd)
}

// StatusPartial is the "status" a report's --json carries when it found
// nothing but its producers reported lost evidence bearing on its verdict.
const StatusPartial = "partial"

// PartialError is returned by a check command that printed its report,
// found nothing, and was judging evidence its producers reported lost: a
// clean exit would vouch for what nobody observed, a finding would accuse
// it. It exits 4 (cmdutil.ExitNoData: the data to judge is, in part,
// not there), like a report over no data, without printing anything more.
var PartialError = &cmdutil.ExitError{Code: cmdutil.ExitNoData}

// partialHelp is the help text of the partial exit, shared by the report
// commands over bundles.
const partialHelp = `Partial: when the bundle's producers reported, in their run.end events, that
they lost evidence bearing on this verdict (events dropped, the instrument
switched off after errors, records skipped), the report names each producer
and what it lost in a line starting "PARTIAL:", --json carries
"status": "partial", "partial": [reasons] and "coverage" (every producer that
lost something), and the exit code is 4 unless a finding was made (1): what
was observed is clean, but not everything was observed.`

// partialText is the report's line naming what the producers lost ("" when
// nothing).
func partialText(lost []string) string {
	if len(lost) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("PARTIAL: the verdict above covers only what was observed; not judged:\n")
	for _, l := range lost {
		fmt.Fprintf(&b, "  %s\n", cmdutil.Quote(l))
	}
	return b.String()
}
