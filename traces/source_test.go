package traces

import (
	"bytes"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// The writer's envelope encoder writes src role and rank as hook does.
func TestWriterLineCarriesRoleRank(t *testing.T) {
	w := &Writer{}
	for _, src := range []hook.Source{
		{Node: "h", Proc: "p", PID: 2, Role: "prefill", Rank: 3},
		{Role: "decode"},
		{Node: "h", Role: "decode", Rank: 1},
	} {
		ev := hook.Event{Kind: hook.KindReplay, TS: 9, Src: src, Body: &hook.Replay{Mode: hook.ModeGraph}}
		want, err := ev.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := w.appendEvent(nil, ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("hook   %s\nwriter %s", want, got)
		}
	}
}
