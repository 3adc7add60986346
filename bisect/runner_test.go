package bisect

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/sessions"
)

// scripted is an engine whose session i of a segment is corrupted when
// corrupt(arm, seed, i) says so. Within a wave of size wave, sessions finish
// corrupted ones first (as leaks end early), so a runner counting by
// completion would over-sample them. fail names arms that fail after
// failAfter sessions; cancel cancels the bisect after cancelAfter sessions.
type scripted struct {
	wave        int
	corrupt     func(arm string, seed uint64, i int) bool
	fail        map[string]bool
	failAfter   int
	cancel      context.CancelFunc
	cancelAfter int
	seen        int
}

func (s *scripted) Run(ctx context.Context, seg Segment, _ *sessions.RunStats, observe func(int, string, string) bool) error {
	for w := range maxWaves(seg.Sessions, s.wave) {
		order := make([]int, 0, s.wave)
		for i := range s.wave { // corrupted first
			if s.corrupt(seg.Arm, seg.WaveSeed(w), i) {
				order = append(order, i)
			}
		}
		for i := range s.wave {
			if !s.corrupt(seg.Arm, seg.WaveSeed(w), i) {
				order = append(order, i)
			}
		}
		for n, i := range order {
			if err := ctx.Err(); err != nil {
				return err
			}
			if s.fail[seg.Arm] && n >= s.failAfter {
				return errors.New("the server exited during the sessions (signal: killed)")
			}
			s.seen++
			if s.cancel != nil && s.seen == s.cancelAfter {
				s.cancel()
			}
			out := hook.OutcomeDone
			if s.corrupt(seg.Arm, seg.WaveSeed(w), i) {
				out = hook.OutcomeLeak
			}
			if observe(w*s.wave+i, fmt.Sprintf("w%d/s%03d", w, i), out) {
				return nil
			}
		}
	}
	return errWavesExhausted(seg.Sessions)
}

// rate corrupts a fraction of sessions, pseudo-randomly by seed and index.
func rate(p map[string]float64) func(string, uint64, int) bool {
	return func(arm string, seed uint64, i int) bool {
		x := segmentSeed(seed, i, 7)
		return float64(x>>11)/float64(1<<53) < p[arm]
	}
}

func smallPlan(t *testing.T) *Plan {
	t.Helper()
	p, err := ParsePlan([]byte(`
[[arm]]
name = "fix"
flags = ["--fix"]
[[arm]]
name = "same"
flags = ["--same"]
[[arm]]
name = "crash"
flags = ["--crash"]
[workload]
concurrency = 40
[stats]
budget = 160
batch = 16
`), "small.toml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunnerCountsInStartOrder(t *testing.T) {
	p := smallPlan(t)
	rates := map[string]float64{"baseline": 0.3, "fix": 0, "same": 0.3, "crash": 0.3}
	eng := &scripted{wave: 40, corrupt: rate(rates), fail: map[string]bool{"crash": true}, failAfter: 10}
	st, err := (&Runner{Plan: p, Engine: eng}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Arms {
		// Counted sessions are each segment's sessions 0…n−1 in index order.
		perSeg := map[string]int{}
		for _, s := range a.Sessions {
			parts := strings.SplitN(s.ID, "/", 3) // arm/segment/wN/sNNN
			seg := parts[1]
			var w, i int
			if _, err := fmt.Sscanf(parts[2], "w%d/s%d", &w, &i); err != nil {
				t.Fatalf("session id %q", s.ID)
			}
			if idx := w*40 + i; idx != perSeg[seg] {
				t.Fatalf("%s: counted session %s at position %d of its segment, want start order", a.Name, s.ID, perSeg[seg])
			}
			perSeg[seg]++
		}
	}
	if d := st.Arms[1].Decision; d != Removes {
		t.Errorf("fix: %q", d)
	}
	if d := st.Arms[2].Decision; d != Nothing && d != CannotTell {
		t.Errorf("same: %q", d)
	}
	crash := st.Arms[3]
	if crash.Decision != Failed || !strings.Contains(crash.Error, "server exited") {
		t.Errorf("crash: %q %q", crash.Decision, crash.Error)
	}
	rep := NewReport(p, st, "")
	if !rep.Complete || len(rep.Verdict.Failed) != 1 || rep.Verdict.Removes[0] != "fix" {
		t.Errorf("report %+v", rep.Verdict)
	}
}

func TestRunnerBaselineFailureStops(t *testing.T) {
	p := smallPlan(t)
	eng := &scripted{wave: 40, corrupt: rate(nil), fail: map[string]bool{"baseline": true}, failAfter: 3}
	st, err := (&Runner{Plan: p, Engine: eng}).Run(context.Background())
	if !errors.Is(err, ErrBaselineFailed) || st.Arms[0].Decision != Failed {
		t.Fatalf("err %v, baseline %q", err, st.Arms[0].Decision)
	}
	for _, a := range st.Arms[1:] {
		if len(a.Sessions) != 0 {
			t.Errorf("%s ran without a baseline", a.Name)
		}
	}
}

// TestRunnerResume: a bisect cancelled mid-arm resumes from its saved state
// and finishes with every session counted before the interruption kept and
// none run twice.
func TestRunnerResume(t *testing.T) {
	p := smallPlan(t)
	p.Arms = p.Arms[:2] // fix, same
	rates := map[string]float64{"baseline": 0.3, "fix": 0, "same": 0.3}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	eng := &scripted{wave: 40, corrupt: rate(rates), cancel: cancel, cancelAfter: 64 + 20 + 10}
	st, err := (&Runner{Plan: p, Engine: eng, Out: dir}).Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want canceled", err)
	}
	before := map[string][]Session{}
	for _, a := range st.Arms {
		before[a.Name] = append([]Session(nil), a.Sessions...)
	}
	if len(before["baseline"]) != 64 || len(before["fix"]) == 0 {
		t.Fatalf("before the interruption: baseline %d, fix %d sessions", len(before["baseline"]), len(before["fix"]))
	}
	saved, err := LoadState(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	eng = &scripted{wave: 40, corrupt: rate(rates)}
	st, err = (&Runner{Plan: p, Engine: eng, Out: dir, State: saved}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Arms {
		seen := map[string]bool{}
		for i, s := range a.Sessions {
			if seen[s.ID] {
				t.Fatalf("%s: session %s counted twice", a.Name, s.ID)
			}
			seen[s.ID] = true
			if i < len(before[a.Name]) && s != before[a.Name][i] {
				t.Fatalf("%s: session %d was %v before the interruption, %v after", a.Name, i, before[a.Name][i], s)
			}
		}
		if a.Name != "baseline" && a.Decision == Undecided {
			t.Errorf("%s undecided after resume", a.Name)
		}
	}
	// A state from another plan is refused.
	other := *p
	other.Digest = "x"
	if _, err := LoadState(dir, &other); err == nil || !strings.Contains(err.Error(), "another plan") {
		t.Errorf("LoadState with another plan: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); err != nil {
		t.Fatal(err)
	}
}
