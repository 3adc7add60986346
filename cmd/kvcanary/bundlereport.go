package main

import (
	"io"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// bundleReplay is what replaying a bundle through one analyzer read and found.
type bundleReplay struct {
	events        uint64
	kinds         [256]uint64 // events per kind
	findings      []*hook.Finding
	findingsTotal int

	skipped   uint64
	skips     []traces.Skip
	truncated bool
	reason    string
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
		if ev.Kind == hook.KindFinding {
			continue
		}
		an.Observe(ev, emit)
	}
	rep.skipped, rep.skips = r.Skipped(), r.Skips()
	rep.truncated, rep.reason = r.Truncated(), r.TruncationReason()
	return rep, nil
}

// warn reports on stderr what of the bundle could not be used.
func (b *bundleReplay) warn(w io.Writer, path string) {
	warnBundle(w, path, b.truncated, b.reason, b.skipped, b.skips)
}
