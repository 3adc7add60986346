package perfetto

import (
	"io"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// shown lists the kinds the timeline shows; the others (graphdiff.sample,
// whose vectors are most of a bundle's bytes, and canary.pages, whose page
// lists are most of the rest: their verdicts are the findings) are counted,
// not decoded.
var shown = func() (k [256]bool) {
	for _, kind := range []hook.Kind{hook.KindRunStart, hook.KindRunEnd, hook.KindRoomChecksum, hook.KindReplay,
		hook.KindSession, hook.KindSched, hook.KindGPU, hook.KindCUDA, hook.KindFinding} {
		k[kind] = true
	}
	return k
}()

// Export reads the bundle r to its end and publishes every event the
// timeline shows into w, in bundle order. It does not close w. It turns off
// r's whole-line JSON validation: lines of the kinds shown are checked by
// decoding them (those that do not decode are counted in Stats.Undecodable),
// lines of other kinds are skipped unread — validating the graphdiff vectors
// cost three quarters of the export's time. The error is for reading failures
// (and an interrupted read).
func Export(r *traces.Reader, w *Writer) error {
	r.SetValidate(false)
	for {
		line, kind, _, err := r.NextLine()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !shown[kind] {
			w.mu.Lock()
			w.stats.Events++
			w.stats.ByKind[kind.String()]++
			w.stats.Ignored++
			w.mu.Unlock()
			continue
		}
		ev, _, err := hook.DecodeJSONLine(line)
		if err != nil {
			w.mu.Lock()
			w.stats.Undecodable++
			w.mu.Unlock()
			continue
		}
		w.Publish(ev)
	}
}
