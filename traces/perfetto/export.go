package perfetto

import (
	"io"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// shown lists the kinds the timeline shows; the others (graphdiff.sample,
// whose vectors are most of a bundle's bytes) are counted, not decoded.
var shown = func() (k [256]bool) {
	for _, kind := range []hook.Kind{hook.KindRunStart, hook.KindRunEnd, hook.KindRoomChecksum, hook.KindReplay,
		hook.KindCanaryPages, hook.KindSession, hook.KindSched, hook.KindGPU, hook.KindCUDA, hook.KindFinding} {
		k[kind] = true
	}
	return k
}()

// Export reads the bundle r to its end and publishes every event the
// timeline shows into w, in bundle order. It does not close w. Lines that do
// not decode are skipped and counted by r, as for every bundle reader; the
// error is for reading failures (and an interrupted read).
func Export(r *traces.Reader, w *Writer) error {
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
