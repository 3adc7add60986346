package bisect

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
)

// Segment is one server lifetime (or a series of twin runs) of an arm.
// It runs waves of the plan's workload — Concurrency sessions started
// together, the seeds' load shape (repro's default: every session at once,
// then the batch drains) — until the bisect has what it needs.
type Segment struct {
	Arm      string
	Flags    []string
	Index    int    // the arm's segment number (0, 1, …)
	Seed     uint64 // picks the waves' tasks (and the twin's rooms and interleaving)
	Sessions int    // sessions wanted: waves run until that many are counted
	Bundle   string // where to record ("" records nothing); wave w > 0 adds "-wN" before the extension
	Log      string // where a launched server's output goes
}

// WaveSeed is the seed of wave w of a segment.
func (s Segment) WaveSeed(w int) uint64 { return segmentSeed(s.Seed, 0, w) }

// WaveBundle is the bundle of wave w ("" when the segment records nothing).
func (s Segment) WaveBundle(w int) string {
	if s.Bundle == "" || w == 0 {
		return s.Bundle
	}
	ext := filepath.Ext(s.Bundle)
	return fmt.Sprintf("%s-w%d%s", strings.TrimSuffix(s.Bundle, ext), w, ext)
}

// Engine runs segments.
type Engine interface {
	// Run runs seg's waves. Each finished session is shown to observe with
	// its index (wave × Concurrency + its place in the wave: the order
	// sessions started in) and an id unique in the segment, from one
	// goroutine at a time; when observe returns true, Run stops and returns
	// nil. Events go to stats (for confounds). An error means the segment
	// could not run: the server did not start, died, or ctx ended.
	Run(ctx context.Context, seg Segment, stats *sessions.RunStats, observe func(i int, id, outcome string) (stop bool)) error
}

// Runner performs a bisect.
type Runner struct {
	Plan   *Plan
	Engine Engine
	// Out is the directory of bundles, logs and the state ("": nothing is
	// written, as in the simulations).
	Out   string
	State *State // a resumed state; nil starts afresh
	// Stats holds each arm's run statistics by name (for confounds); a
	// resumed bisect fills them from the bundles of earlier segments.
	Stats map[string]*sessions.RunStats
	Log   func(format string, args ...any) // progress lines; nil: none
	// Progress, when set, sees every counted session: the arm, its
	// sessions counted and corrupted, and how many this segment runs to
	// (a live status line).
	Progress func(arm string, counted, corrupted, target int)
}

// ErrBaselineFailed marks a bisect that could not run its baseline.
var ErrBaselineFailed = errors.New("the baseline could not run")

// Run performs the plan's bisect and returns its state; on an error the
// state holds everything counted so far (and is saved, with Out set).
func (r *Runner) Run(ctx context.Context) (*State, error) {
	if r.State == nil {
		r.State = NewState(r.Plan)
	}
	if r.Stats == nil {
		r.Stats = map[string]*sessions.RunStats{}
	}
	if r.Log == nil {
		r.Log = func(string, ...any) {}
	}
	st, d := r.State, r.Plan.Design()
	// A resumed bisect tries again what failed (a server that would not
	// start may have been fixed); what it counted stays.
	for _, a := range st.Arms {
		if a.Decision == Failed {
			a.Decision, a.Error = Undecided, ""
		}
	}
	if err := r.grow(ctx, r.Plan.Stats.BaselineStart); err != nil {
		return st, r.finish(err)
	}
	for i := 1; i < len(st.Arms); i++ {
		a := st.Arms[i]
		for a.Decision == Undecided {
			if err := r.armStep(ctx, i, d); err != nil {
				if errors.Is(err, ErrBaselineFailed) || ctx.Err() != nil {
					return st, r.finish(err)
				}
				a.Decision, a.Error = Failed, err.Error()
				r.Log("bisect: %s failed: %s", a.Name, firstLine(a.Error))
			}
			if err := r.save(); err != nil {
				return st, err
			}
		}
	}
	return st, r.finish(nil)
}

// armStep runs arm i up to the baseline's size (growing the baseline first
// when the arm's next look needs more of it), looking every Batch sessions.
func (r *Runner) armStep(ctx context.Context, i int, d Design) error {
	st := r.State
	a, base := st.Arms[i], st.Arms[0]
	n := len(a.Sessions)
	next := min(d.Budget, (n/d.Batch+1)*d.Batch)
	if len(base.Sessions) < next {
		if err := r.grow(ctx, min(d.Budget, max(2*len(base.Sessions), next))); err != nil {
			return err
		}
	}
	target := min(d.Budget, max(len(base.Sessions), next))
	bn, bk := len(base.Sessions), base.Corrupted()
	k := a.Corrupted()
	return r.segment(ctx, i, target-n, func(s Session) bool {
		if outcome.IsCorrupted(s.Outcome) {
			k++
		}
		n := len(a.Sessions)
		if !d.LookAt(n) {
			return false
		}
		l := d.Judge(n, k, bn, bk)
		a.Looks = append(a.Looks, l)
		a.Decision = l.Decision
		r.Log("bisect: %s look at %d: %d/%d corrupted vs baseline %d/%d; p=%s (level %s), reduction ≤ %.3f (min effect %.2f)%s",
			a.Name, n, k, n, bk, bn, sessions.FormatP(l.P), sessions.FormatP(l.PLevel), l.Upper, d.MinEffect, decisionSuffix(l.Decision))
		if err := r.save(); err != nil {
			r.Log("bisect: %v", err)
		}
		return l.Decision != Undecided
	})
}

func decisionSuffix(d Decision) string {
	if d == Undecided {
		return ""
	}
	return ": " + strings.ToUpper(string(d))
}

// grow runs the baseline until it has n sessions.
func (r *Runner) grow(ctx context.Context, n int) error {
	base := r.State.Arms[0]
	for len(base.Sessions) < n {
		have := len(base.Sessions)
		r.Log("bisect: baseline: running sessions %d-%d", have+1, n)
		d := r.Plan.Design()
		saveEach := func(Session) bool {
			if d.LookAt(len(base.Sessions)) {
				if err := r.save(); err != nil {
					r.Log("bisect: %v", err)
				}
			}
			return false
		}
		if err := r.segment(ctx, 0, n-have, saveEach); err != nil {
			if ctx.Err() != nil {
				return err
			}
			base.Decision, base.Error = Failed, err.Error()
			_ = r.save()
			return fmt.Errorf("%w: %s", ErrBaselineFailed, err)
		}
		r.Log("bisect: baseline: %d/%d corrupted", base.Corrupted(), len(base.Sessions))
		if err := r.save(); err != nil {
			return err
		}
	}
	return nil
}

// segment runs one segment of arm i and counts up to want sessions, in
// start order: session j is counted once sessions 0…j have all finished,
// so the sessions counted never depend on which finished first (a leak
// ends a session early; counting by completion would over-sample
// corrupted sessions at every look). Sessions of a wave that are not
// counted (the bisect had enough) are not evidence and are dropped. each
// sees every counted session and says when to stop.
func (r *Runner) segment(ctx context.Context, i, want int, each func(Session) (stop bool)) error {
	a := r.State.Arms[i]
	idx := len(a.Segments)
	seg := Segment{Arm: a.Name, Flags: a.Flags, Index: idx, Seed: segmentSeed(uint64(r.Plan.Workload.Seed), i, idx), Sessions: want}
	if r.Out != "" {
		seg.Bundle = filepath.Join(r.Out, fmt.Sprintf("%s-%d.kvtrace", a.Name, idx))
		if r.Plan.Server.Engine == EngineCommand {
			seg.Log = filepath.Join(r.Out, fmt.Sprintf("%s-%d.log", a.Name, idx))
		}
	}
	a.Segments = append(a.Segments, SegmentRecord{Index: idx, Seed: seg.Seed, Bundle: seg.Bundle, Log: seg.Log})
	rec := &a.Segments[idx]
	stats := r.Stats[a.Name]
	if stats == nil {
		stats = sessions.NewRunStats(a.Name)
		r.Stats[a.Name] = stats
	}
	done := map[int]Session{}
	next, stopped := 0, false
	err := r.Engine.Run(ctx, seg, stats, func(j int, id, outcome string) bool {
		rec.Started++
		if stopped {
			return true
		}
		done[j] = Session{ID: fmt.Sprintf("%s/%d/%s", a.Name, idx, id), Outcome: outcome}
		for !stopped {
			s, ok := done[next]
			if !ok {
				break
			}
			delete(done, next)
			next++
			a.Sessions = append(a.Sessions, s)
			rec.Counted++
			if r.Progress != nil {
				r.Progress(a.Name, len(a.Sessions), a.Corrupted(), len(a.Sessions)-rec.Counted+want)
			}
			stopped = each(s) || rec.Counted >= want
		}
		return stopped
	})
	if err == nil && !stopped && rec.Counted < want {
		err = fmt.Errorf("the segment ended with %d of %d sessions counted", rec.Counted, want)
	}
	if err != nil {
		rec.Error = err.Error()
	}
	return err
}

// segmentSeed mixes the plan's seed with the arm and segment, so every
// segment runs new sessions (a resumed arm never repeats a counted one).
func segmentSeed(seed uint64, arm, seg int) uint64 {
	x := seed ^ uint64(arm+1)*0x9e3779b97f4a7c15 ^ uint64(seg+1)*0xbf58476d1ce4e5b9
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// confounds compares every arm that ran with the baseline: settings that
// differ other than the arm's own flags, and the workload and scheduler
// differences repro's A/B reports.
func (r *Runner) confounds() {
	base := r.Stats["baseline"]
	if base == nil {
		return
	}
	for i, a := range r.State.Arms[1:] {
		s := r.Stats[a.Name]
		if s == nil {
			continue
		}
		diffs, _, cs := sessions.Confounds(base, s, "")
		a.FlagDiffs, a.ConfoundsChecked = diffs, true
		own := flagNames(r.Plan.Arms[i].Flags)
		a.Confounds = a.Confounds[:0]
		for _, c := range cs {
			switch {
			case c.Name == "sessions":
				continue // arms stop at different sizes by design
			case own[settingKey(c.Name)]:
				continue // the flag under test
			}
			a.Confounds = append(a.Confounds, c)
		}
	}
}

// flagNames are the settings an arm's flags name, in settings' spelling
// (--cuda-graph-max-bs → cuda_graph_max_bs; --disable-cuda-graph →
// cuda_graph).
func flagNames(flags []string) map[string]bool {
	m := map[string]bool{}
	for _, f := range flags {
		name, ok := strings.CutPrefix(f, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		key := strings.ReplaceAll(name, "-", "_")
		m[key] = true
		for _, p := range []string{"disable_", "enable_"} {
			if k, ok := strings.CutPrefix(key, p); ok {
				m[k] = true
			}
		}
	}
	return m
}

// settingKey strips repro's "server." and "extra." prefixes.
func settingKey(name string) string {
	for _, p := range []string{"server.", "extra."} {
		if k, ok := strings.CutPrefix(name, p); ok {
			return k
		}
	}
	return name
}

func (r *Runner) save() error {
	if r.Out == "" {
		return nil
	}
	return r.State.Save(r.Out)
}

// finish compares the arms with the baseline (also when the bisect stops
// early: a "removes it" is never claimed without its confounds checked)
// and saves the state.
func (r *Runner) finish(err error) error {
	r.confounds()
	if serr := r.save(); serr != nil && err == nil {
		err = serr
	}
	return err
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// LoadStats fills Stats from the bundles of the state's segments (a
// resumed bisect's confounds cover every segment).
func (r *Runner) LoadStats() error {
	if r.Stats == nil {
		r.Stats = map[string]*sessions.RunStats{}
	}
	var errs []error
	for _, a := range r.State.Arms {
		for _, s := range a.Segments {
			if s.Bundle == "" {
				continue
			}
			if err := r.loadBundle(a.Name, s.Bundle); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (r *Runner) loadBundle(arm, path string) error {
	br, err := traces.Open(path)
	if err != nil {
		return err
	}
	defer br.Close()
	st := r.Stats[arm]
	if st == nil {
		st = sessions.NewRunStats(arm)
		m := br.Manifest()
		st.SetManifest(m.Tool, m.Created, m.Host, m.Config)
		r.Stats[arm] = st
	}
	for ev, err := range br.All() {
		if err != nil {
			return err
		}
		if ev.Kind != hook.KindRunStart && ev.Kind != hook.KindRunEnd {
			st.Observe(ev)
		}
	}
	return nil
}
