package hook

import (
	"slices"
	"testing"
)

// Each typed vocabulary accepts exactly the values the validators allow.
func TestVocabularies(t *testing.T) {
	var sides []string
	for _, s := range Sides() {
		sides = append(sides, string(s))
		if p, err := ParseSide(string(s)); err != nil || p != s || !s.Valid() {
			t.Errorf("side %q: ParseSide %q, %v; Valid %v", s, p, err, s.Valid())
		}
		if err := (&RoomChecksum{Side: s}).validate(); err != nil {
			t.Errorf("side %q refused by the validator: %v", s, err)
		}
	}
	if !slices.Equal(sides, []string{"prefill", "decode"}) {
		t.Errorf("Sides() = %v", sides)
	}
	for _, s := range Severities() {
		if p, err := ParseSeverity(string(s)); err != nil || p != s || !s.Valid() {
			t.Errorf("severity %q: ParseSeverity %q, %v", s, p, err)
		}
	}
	for _, m := range ReplayModes() {
		if p, err := ParseReplayMode(string(m)); err != nil || p != m || !m.Valid() {
			t.Errorf("mode %q: ParseReplayMode %q, %v", m, p, err)
		}
		if err := (&Replay{Mode: string(m)}).validate(); err != nil {
			t.Errorf("mode %q refused by the validator: %v", m, err)
		}
	}
	for _, bad := range []string{"", "Prefill", "warning", "cuda-graph"} {
		if _, err := ParseSide(bad); err == nil || Side(bad).Valid() {
			t.Errorf("side %q accepted", bad)
		}
		if _, err := ParseSeverity(bad); err == nil || Severity(bad).Valid() {
			t.Errorf("severity %q accepted", bad)
		}
		if _, err := ParseReplayMode(bad); err == nil || ReplayMode(bad).Valid() {
			t.Errorf("mode %q accepted", bad)
		}
		if err := (&RoomChecksum{Side: Side(bad)}).validate(); err == nil {
			t.Errorf("validator took side %q", bad)
		}
		if err := (&Replay{Mode: bad}).validate(); err == nil {
			t.Errorf("validator took mode %q", bad)
		}
	}
}
