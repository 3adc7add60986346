package canary

import (
	"testing"

	"github.com/kvcanary/kvcanary/spec/pagediff"
)

func TestChangesMapsIndicesToPages(t *testing.T) {
	checked := []uint32{4, 10, 11, 900}
	before := []uint64{1, 2, 3, 4}
	after := []uint64{1, 5, 3, 6}
	idx := pagediff.Diff(before, after, nil)
	owner := func(p uint32) string {
		if p == 900 {
			return ""
		}
		return "req-" + string(rune('a'+p%26))
	}
	got := Changes(checked, before, after, append(idx, 99), owner, nil)
	if len(got) != 2 {
		t.Fatalf("got %d changes, want 2: %+v", len(got), got)
	}
	if got[0].Page != 10 || got[0].Before != 2 || got[0].After != 5 || got[0].Owner != owner(10) {
		t.Errorf("change 0 = %+v", got[0])
	}
	if got[1].Page != 900 || got[1].Owner != "" || got[1].After != 6 {
		t.Errorf("change 1 = %+v", got[1])
	}
}
