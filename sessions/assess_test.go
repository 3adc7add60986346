package sessions

import (
	"testing"

	"github.com/kvcanary/kvcanary/spec/outcome"
)

func TestAssess(t *testing.T) {
	for _, tc := range []struct {
		o       outcome.Counts
		verdict string
	}{
		{outcome.Counts{Error: 3}, VerdictServerFailed},
		{outcome.Counts{Error: 2, Timeout: 1}, VerdictServerFailed},
		{outcome.Counts{Error: 2, Done: 1}, VerdictMeasured},
		{outcome.Counts{NoTool: 1, Done: 3}, VerdictNeedsControl}, // 25%
		{outcome.Counts{NoTool: 1, Done: 4}, VerdictMeasured},     // 20%
		{outcome.Counts{Leak: 4}, VerdictMeasured},
		{outcome.Counts{}, VerdictMeasured},
	} {
		v, note := Assess(tc.o)
		if v != tc.verdict || (v == VerdictMeasured) != (note == "") {
			t.Errorf("%+v: %s %q, want %s", tc.o, v, note, tc.verdict)
		}
	}
}
