package main

import (
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/analyzers"
)

// TestSimRunSections: sim run prints each instrument as its dedicated
// report's headline, transfer → buffer → compute, and no key=value blob.
func TestSimRunSections(t *testing.T) {
	var b strings.Builder
	err := writeSimRunSections(&b, analyzers.Summaries{
		Graphdiff: &graphdiff.Summary{},
		Canary:    &canary.Summary{},
		Checksum:  &checksum.Summary{Rooms: 40, Matched: 22, Mismatched: 17, Warmup: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	want := []string{
		"transfer (room checksums): 22/40 rooms match; 17 mismatch; 1 warmup\n",
		"buffer (replay canary):    not checked (no canary.pages events)\n",
		"compute (graph vs eager):  no graph-vs-eager samples: ",
	}
	at := 0
	for _, w := range want {
		i := strings.Index(out[at:], w)
		if i < 0 {
			t.Fatalf("missing or out of order %q in\n%s", w, out)
		}
		at += i + len(w)
	}
	if strings.Contains(out, "=") {
		t.Errorf("key=value left in\n%s", out)
	}
}
