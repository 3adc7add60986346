package outcome

import (
	"slices"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// TestClassesMatchHook pins the classes to the session event's outcome
// vocabulary: same strings, same report order.
func TestClassesMatchHook(t *testing.T) {
	var got []string
	for _, c := range Classes() {
		got = append(got, string(c))
		if !c.Valid() || !hook.ValidOutcome(string(c)) {
			t.Errorf("class %q: Valid %v, hook.ValidOutcome %v", c, c.Valid(), hook.ValidOutcome(string(c)))
		}
		if p, err := ParseClass(string(c)); err != nil || p != c {
			t.Errorf("ParseClass(%q) = %q, %v", c, p, err)
		}
	}
	if !slices.Equal(got, hook.Outcomes) {
		t.Errorf("Classes() = %v, hook.Outcomes = %v", got, hook.Outcomes)
	}
	for _, bad := range []string{"", "Done", "no-tool", "ok"} {
		if Class(bad).Valid() {
			t.Errorf("Class(%q).Valid() = true", bad)
		}
		if _, err := ParseClass(bad); err == nil {
			t.Errorf("ParseClass(%q): no error", bad)
		}
	}
}
