package main

import (
	"fmt"
	"io"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// dialEmit dials a producer's --emit collector (nil without an address):
// the same Go emitter repro streams through. A malformed address is a
// usage error naming --emit; a collector that is not there yet is retried
// in the background.
func dialEmit(addr, run string, src hook.Source) (*hook.Emitter, error) {
	if addr == "" {
		return nil, nil
	}
	em, err := hook.Dial(addr, hook.DialOptions{Run: run, Source: src})
	if err != nil {
		return nil, cmdutil.UsageError("--emit: %w", err)
	}
	return em, nil
}

// writeEmitStats closes the emitter (flushing what is queued) and says what
// the --emit stream delivered and lost: "gpu: emit: 12 events sent to …, 0 dropped".
func writeEmitStats(w io.Writer, name, addr string, em *hook.Emitter) {
	em.Close()
	st := em.Stats()
	fmt.Fprintf(w, "%s: emit: %d events sent to %s, %d dropped", name, st.Sent, cmdutil.Quote(addr), st.Dropped+st.Invalid)
	if e := em.LastError(); e != "" && st.Dropped+st.Invalid > 0 {
		fmt.Fprintf(w, " (last error: %s)", cmdutil.Quote(e))
	}
	fmt.Fprintln(w)
}
