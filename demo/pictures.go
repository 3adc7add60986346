package demo

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvcanary/kvcanary/report"
	"github.com/kvcanary/kvcanary/traces"
	"github.com/kvcanary/kvcanary/traces/perfetto"
)

// Pictures are the shareable artefacts the demo writes next to its bundles.
type Pictures struct {
	Report   string `json:"report,omitempty"`   // report.html: the investigation at a glance
	Timeline string `json:"timeline,omitempty"` // timeline.json: the baseline in Perfetto
}

// BundlesGoneNote is what report.html says in place of its re-check
// commands when the demo's bundles are removed after the run.
const BundlesGoneNote = "The runs' bundles were recorded in a temporary directory and removed when the demo ended, " +
	"so there is nothing left to re-check. To keep them and get the commands that re-check each claim, " +
	"run: kvcanary demo --out DIR (or: kvcanary demo --keep)."

// writePictures writes report.html (every run, the baseline first) and
// timeline.json (the baseline's Chrome trace-event timeline) into out. With
// removed, the bundles will be deleted: the report says so instead of
// naming them in commands.
func writePictures(out string, bundles []string, removed bool) (Pictures, error) {
	var pics Pictures
	if len(bundles) == 0 {
		return pics, nil
	}
	var runs []*report.Run
	for _, path := range bundles {
		r, err := traces.Open(path)
		if err != nil {
			return pics, fmt.Errorf("demo: report: %w", err)
		}
		run, err := report.Read(path, r)
		r.Close()
		if err != nil {
			return pics, fmt.Errorf("demo: report: %w", err)
		}
		runs = append(runs, run)
	}
	html := filepath.Join(out, "report.html")
	f, err := os.OpenFile(html, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600) // as private as the bundles: it quotes their outputs
	if err != nil {
		return pics, fmt.Errorf("demo: %w", err)
	}
	rep := report.Build(runs)
	if removed {
		rep.BundlesGone = BundlesGoneNote
	}
	err = rep.WriteHTML(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return pics, fmt.Errorf("demo: write %s: %w", html, err)
	}
	pics.Report = html

	timeline := filepath.Join(out, "timeline.json")
	r, err := traces.Open(bundles[0])
	if err != nil {
		return pics, fmt.Errorf("demo: timeline: %w", err)
	}
	defer r.Close()
	tf, err := os.OpenFile(timeline, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return pics, fmt.Errorf("demo: %w", err)
	}
	w := perfetto.NewWriter(tf)
	err = perfetto.Export(r, w)
	if werr := w.Close(); err == nil {
		err = werr
	}
	if cerr := tf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return pics, fmt.Errorf("demo: write %s: %w", timeline, err)
	}
	pics.Timeline = timeline
	return pics, nil
}

// pictures is what Run calls once every run is done: when opts.Pictures is
// set it writes the pictures and names them in the report.
func (rep *Report) pictures(opts Options, runs []*run) error {
	if !opts.Pictures {
		return nil
	}
	var bundles []string
	for _, r := range runs {
		if r.bundle != "" {
			bundles = append(bundles, r.bundle)
		}
	}
	pics, err := writePictures(rep.Out, bundles, opts.BundlesRemoved)
	rep.Pictures = pics
	return err
}
