package hook

import (
	"testing"

	"github.com/kvcanary/kvcanary/internal/testenv"
)

// Issue 27 D6: the Go emitter fills a run.end's sent with the events it
// wrote or queued ahead of it (WIRE.md, "run.end's sent"), so a reader can
// tell whether the bundle holds them all; the caller's body is left alone.
func TestEmitterRunEndCarriesSent(t *testing.T) {
	c, rec := startCollector(t, ListenOptions{})
	em, err := Dial(c.Addr(), DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		em.Emit(replayEvent(uint64(i)))
	}
	body := &RunEnd{WallNS: 1}
	em.Emit(Event{Kind: KindRunEnd, TS: 99, Body: body})
	em.Close()
	testenv.WaitFor(t, "run.end", func() bool { return c.Stats().ByKind["run.end"] == 1 })
	var held int
	var end *RunEnd
	for _, ev := range rec.events() {
		if b, ok := ev.Body.(*RunEnd); ok {
			end = b
		} else {
			held++
		}
	}
	if end == nil || end.Sent != 9 || held != 9 {
		t.Fatalf("run.end %+v with %d events held, want sent 9 and 9 held", end, held)
	}
	if body.Sent != 0 {
		t.Fatalf("the caller's run.end body was changed: sent %d", body.Sent)
	}
	if st := em.Stats(); st.Sent != 10 {
		t.Fatalf("emitter sent %d frames, want 10 (run.end included)", st.Sent)
	}
}
