package analyzers

import "testing"

// Every analyzer has a distinct, non-empty name (it keys report sections),
// and each call returns fresh instances (analyzers hold per-run state).
func TestAllNamesAreDistinctAndInstancesFresh(t *testing.T) {
	a, b := All(Options{WarmupMaxSeqLen: 4}), All(Options{})
	if len(a) < 3 || len(a) != len(b) {
		t.Fatalf("got %d and %d analyzers, want the same list of at least 3", len(a), len(b))
	}
	seen := map[string]bool{}
	for i, an := range a {
		name := an.Name()
		if name == "" || seen[name] {
			t.Fatalf("analyzer %d: name %q empty or repeated", i, name)
		}
		seen[name] = true
		if an == b[i] {
			t.Fatalf("analyzer %q: the same instance returned twice", name)
		}
	}
	for _, want := range []string{"canary", "checksum", "graphdiff"} {
		if !seen[want] {
			t.Errorf("analyzer %q missing from %v", want, seen)
		}
	}
}
