package bisect

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvcanary/kvcanary/internal/outfile"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// StateFile is the bisect's saved state in its output directory.
const StateFile = "bisect-state.json"

const stateVersion = 1

// legacyNothing is what states saved before Nothing was renamed call it
// (the same decision: no reduction of MinEffect or more).
const legacyNothing Decision = "changes nothing"

// State is everything a bisect has learnt; it is saved after every look,
// so an interrupted bisect resumes with nothing re-run and nothing lost.
type State struct {
	Version    int         `json:"version"`
	Plan       string      `json:"plan"`
	PlanDigest string      `json:"plan_digest"`
	Engine     string      `json:"engine"`
	Arms       []*ArmState `json:"arms"` // [0] is the baseline
}

// ArmState is one arm's sessions, segments, looks and decision.
type ArmState struct {
	Name      string              `json:"name"`
	Flags     []string            `json:"flags"`
	Sessions  []Session           `json:"sessions"` // counted, in start order
	Segments  []SegmentRecord     `json:"segments"`
	Looks     []Look              `json:"looks,omitempty"`
	Decision  Decision            `json:"decision"`
	Error     string              `json:"error,omitempty"`
	Confounds []sessions.Confound `json:"confounds,omitempty"`
	// ConfoundsChecked: the arm was compared with the baseline (its
	// statistics were at hand); a claim without it is not made.
	ConfoundsChecked bool                `json:"confounds_checked"`
	FlagDiffs        []sessions.FlagDiff `json:"flag_diffs,omitempty"` // settings that differ from the baseline's
}

// Session is one counted session.
type Session struct {
	ID      string `json:"id"` // arm/segment/the engine's session id
	Outcome string `json:"outcome"`
}

// SegmentRecord is one server lifetime (or twin run) of an arm.
type SegmentRecord struct {
	Index   int    `json:"index"`
	Seed    uint64 `json:"seed"`
	Bundle  string `json:"bundle,omitempty"`
	Log     string `json:"log,omitempty"`
	Counted int    `json:"counted"`  // sessions counted from it
	Started int    `json:"finished"` // sessions that finished in it, counted or not
	Error   string `json:"error,omitempty"`
}

// Corrupted counts the arm's corrupted sessions.
func (a *ArmState) Corrupted() int {
	n := 0
	for _, s := range a.Sessions {
		if outcome.IsCorrupted(s.Outcome) {
			n++
		}
	}
	return n
}

// NewState starts a bisect of plan.
func NewState(p *Plan) *State {
	st := &State{Version: stateVersion, Plan: p.Path, PlanDigest: p.Digest, Engine: p.Server.Engine}
	st.Arms = append(st.Arms, &ArmState{Name: "baseline", Flags: p.ArmFlags(-1)})
	for i, a := range p.Arms {
		st.Arms = append(st.Arms, &ArmState{Name: a.Name, Flags: p.ArmFlags(i)})
	}
	return st
}

// LoadState reads a saved state and checks it belongs to plan.
func LoadState(dir string, p *Plan) (*State, error) {
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("resume: %s: %w", path, err)
	}
	switch {
	case st.Version != stateVersion:
		return nil, fmt.Errorf("resume: %s: state version %d, this kvcanary writes %d", path, st.Version, stateVersion)
	case st.PlanDigest != p.Digest:
		return nil, fmt.Errorf("resume: %s was made with another plan (or %s changed since): a resumed bisect must run the same plan", path, p.Path)
	case len(st.Arms) != len(p.Arms)+1:
		return nil, fmt.Errorf("resume: %s has %d arms, the plan %d", path, len(st.Arms)-1, len(p.Arms))
	}
	for _, a := range st.Arms {
		if a.Decision == legacyNothing {
			a.Decision = Nothing
		}
	}
	return &st, nil
}

// Save writes the state atomically (a temporary file renamed over it).
func (st *State) Save(dir string) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	// outfile never renames over a symbolic link or a device at the name.
	err = outfile.WriteFile(context.Background(), filepath.Join(dir, StateFile), outfile.Options{Perm: 0o644}, func(f *os.File) error {
		_, err := f.Write(append(b, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}
