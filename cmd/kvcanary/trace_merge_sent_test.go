package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// sentProducer is the producer of the issue 27 D6 tests, as a collector
// fills its src.
var sentProducer = hook.Source{Node: "gpu-7", Proc: "python3", PID: 7909}

// producerReplays are n replay events of sentProducer, steps from first.
func producerReplays(first, n int) []hook.Event {
	var evs []hook.Event
	for i := range n {
		evs = append(evs, hook.Event{Kind: hook.KindReplay, Src: sentProducer, Run: "r",
			Body: &hook.Replay{Step: uint64(first + i), BatchSize: 1, Bucket: 1, Mode: "graph"}})
	}
	return evs
}

func producerEnd(sent uint64) hook.Event {
	return hook.Event{Kind: hook.KindRunEnd, Src: sentProducer, Run: "r", Body: &hook.RunEnd{WallNS: 1, Sent: sent}}
}

// Issue 27 D6: a producer whose run.end says it sent 15 events, spread over
// two bundles (its collector was killed and restarted), is judged by what
// the two bundles hold together: all 15 is clean; 4 of the first bundle's
// lost with the killed collector is partial, naming the producer and the
// shortfall; a run.end without sent (an older producer) is never a
// shortfall.
func TestTraceMergeSentShortfallIsPartial(t *testing.T) {
	cases := []struct {
		name    string
		first   int    // of the first 10 events, those the killed collector's bundle kept
		sent    uint64 // run.end's sent
		partial string // "": clean
	}{
		{"all held", 10, 15, ""},
		{"crash lost 4", 6, 15, "python3 pid 7909 on gpu-7 sent 15 events, the bundles hold 11 (4 missing)"},
		{"sent not known", 6, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			now := time.Now()
			a := writeBundleAt(t, filepath.Join(dir, "a.kvtrace"), traces.Manifest{Run: "r", Created: now}, producerReplays(0, tc.first)...)
			b := writeBundleAt(t, filepath.Join(dir, "b.kvtrace"), traces.Manifest{Run: "r", Created: now.Add(time.Second)},
				append(producerReplays(10, 5), producerEnd(tc.sent))...)
			ios, _, stdout, _ := cmdutil.Test()
			jf := &cmdutil.JSONFlags{JSON: true}
			if err := traceMergeRun(&TraceMergeOptions{IO: ios, Ctx: context.Background(), JSON: jf, Paths: []string{a, b},
				Out: filepath.Join(dir, "m.kvtrace"), Window: 16}); err != nil {
				t.Fatal(err)
			}
			var rep TraceMergeReport
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("%v: %s", err, stdout.String())
			}
			if tc.partial == "" {
				if rep.Status != "" || len(rep.Partial) != 0 {
					t.Fatalf("status %q partial %q, want clean", rep.Status, rep.Partial)
				}
				return
			}
			if rep.Status != StatusPartial || strings.Join(rep.Partial, "|") != tc.partial {
				t.Fatalf("status %q partial %q, want partial %q", rep.Status, rep.Partial, tc.partial)
			}
			// The text report says it too.
			ios, _, stdout, _ = cmdutil.Test()
			if err := traceMergeRun(&TraceMergeOptions{IO: ios, Ctx: context.Background(), JSON: &cmdutil.JSONFlags{}, Paths: []string{a, b},
				Out: filepath.Join(dir, "m2.kvtrace"), Window: 16}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(stdout.String(), "partial: "+tc.partial) {
				t.Fatalf("text report lacks the shortfall:\n%s", stdout.String())
			}
		})
	}
}
