package hook

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/testenv"
)

// A producer that sent events and whose connections all ended without a
// run.end (killed, cut off) is counted and named; one that sent its run.end
// (also on a later connection, after a reconnect) or sent nothing is not.
func TestCollectorCountsProducersEndedWithoutRunEnd(t *testing.T) {
	c, err := Listen("unix://"+filepath.Join(t.TempDir(), "c.sock"), ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- c.Serve(context.Background(), &recorder{t: t}) }()
	ev := func(pid int32, proc string, kind Kind) []byte {
		e := replayEvent(1)
		if kind == KindRunEnd {
			e = Event{Kind: KindRunEnd, TS: 2, Body: &RunEnd{WallNS: 1}}
		}
		e.Src = Source{PID: pid, Proc: proc}
		return jsonLine(t, e)
	}
	send := func(lines ...[]byte) {
		nc := dialRaw(t, c)
		for _, l := range lines {
			if _, err := nc.Write(l); err != nil {
				t.Fatal(err)
			}
		}
		nc.Close()
	}
	send(ev(11, "clean", KindReplay), ev(11, "clean", KindRunEnd))   // ended properly
	send(ev(12, "killed", KindReplay), ev(12, "killed", KindReplay)) // killed: no run.end
	// A producer's earlier connection that ends after its run.end came on a
	// later one (either order of the two) is no producer without run.end.
	first := dialRaw(t, c)
	if _, err := first.Write(ev(13, "moved", KindReplay)); err != nil {
		t.Fatal(err)
	}
	send(ev(13, "moved", KindReplay), ev(13, "moved", KindRunEnd))
	testenv.WaitFor(t, "the run.end of pid 13", func() bool { return c.Stats().ByKind["run.end"] == 2 })
	first.Close()
	send(ev(15, "moved2", KindReplay))
	send(ev(15, "moved2", KindRunEnd))
	send() // sent nothing
	testenv.WaitFor(t, "seven connections ended", func() bool {
		st := c.Stats()
		return st.Connections == 7 && st.Open == 0
	})
	lingering := dialRaw(t, c) // still connected at Close: cut off
	if _, err := lingering.Write(ev(14, "lingering", KindReplay)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "lingering event", func() bool { return c.Stats().Events == 10 })
	c.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.EndedWithoutRunEnd != 2 || strings.Join(st.EndedWithoutRunEndSources, ",") != "killed pid 12,lingering pid 14" {
		t.Fatalf("ended without run.end %d %q, want 2: killed pid 12, lingering pid 14", st.EndedWithoutRunEnd, st.EndedWithoutRunEndSources)
	}
	ends := 0
	for _, cs := range st.Conns {
		if cs.RunEnd {
			ends++
		}
	}
	if ends != 3 {
		t.Fatalf("%d connections with a run.end, want 3: %+v", ends, st.Conns)
	}
}
