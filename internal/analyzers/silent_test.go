package analyzers

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

func engineStart(role string, rank, tp int) hook.Event {
	r := rank
	return hook.Event{Kind: hook.KindRunStart, Src: hook.Source{Proc: "python3", PID: int32(100 + rank), Role: role, Rank: int32(rank)},
		Body: &hook.RunStart{Config: hook.RunConfig{TPSize: tp, Provenance: map[string]string{"tp_size": hook.ProvEngine}}, TPRank: &r}}
}

func TestSilentRanksNamesTheRankThatNeverReported(t *testing.T) {
	cc := NewCoverageCollector()
	cc.Observe(engineStart("prefill", 0, 1))
	cc.Observe(engineStart("decode", 0, 2))
	cc.Observe(hook.Event{Kind: hook.KindRunEnd, Src: hook.Source{Proc: "python3", Role: "decode"}, Body: &hook.RunEnd{}})
	c := cc.Result()
	if want := []string{"decode rank 1 of 2 never reported"}; !slices.Equal(c.Silent, want) {
		t.Fatalf("silent %q, want %q", c.Silent, want)
	}
	lost := c.Lost(canary.AnalyzerName)
	if len(lost) != 1 || !strings.Contains(lost[0], "decode rank 1 of 2 never reported") {
		t.Errorf("Lost %q: a silent rank bears on every layer", lost)
	}
	if c.Partial("checksum") == "" {
		t.Error("a silent rank makes the transfer verdict partial")
	}
	// rank 1 reports (any engine event with its role and rank): nobody is silent
	cc.Observe(hook.Event{Kind: hook.KindReplay, Src: hook.Source{Role: "decode", Rank: 1}, Body: &hook.Replay{}})
	if s := cc.Result().Silent; len(s) != 0 {
		t.Errorf("silent %q after rank 1 reported", s)
	}
}

func TestSilentRanksOutsidePDUseTheRunStartRank(t *testing.T) {
	cc := NewCoverageCollector()
	cc.Observe(engineStart("", 1, 3))
	if want := []string{"rank 0 of 3 never reported", "rank 2 of 3 never reported"}; !slices.Equal(cc.Result().Silent, want) {
		t.Fatalf("silent %q, want %q", cc.Result().Silent, want)
	}
}

func TestSilentRanksUnknownWithoutATPSize(t *testing.T) {
	cc := NewCoverageCollector()
	cc.Observe(hook.Event{Kind: hook.KindRoomChecksum, Src: hook.Source{Role: "decode", Rank: 3}, Body: &hook.RoomChecksum{}})
	// a wrapper's own run.start states nothing about the engine
	cc.Observe(hook.Event{Kind: hook.KindRunStart, Src: hook.Source{Proc: "kvcanary-wrap"}, Body: &hook.RunStart{Config: hook.RunConfig{TPSize: 8}}})
	if s := cc.Result().Silent; len(s) != 0 {
		t.Errorf("silent %q: no engine process said how many ranks there are", s)
	}
}

func TestSilentRanksOnSeveralNodesExpectThisNodesSlice(t *testing.T) {
	cc := NewCoverageCollector()
	ev := engineStart("decode", 4, 8)
	ev.Body.(*hook.RunStart).Config.Extra = map[string]string{"nnodes": "2", "node_rank": "1"}
	cc.Observe(ev)
	want := []string{"decode rank 5 of 8 never reported", "decode rank 6 of 8 never reported", "decode rank 7 of 8 never reported"}
	if got := cc.Result().Silent; !slices.Equal(got, want) {
		t.Fatalf("silent %q, want %q: ranks 0-3 run on the other node", got, want)
	}
}
