package bisect

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// Report is a finished (or interrupted) bisect, for people and --json.
type Report struct {
	Plan     string      `json:"plan"`
	Out      string      `json:"out,omitempty"`
	Engine   string      `json:"engine"`
	Design   Design      `json:"design"`
	Arms     []ArmReport `json:"arms"` // [0] is the baseline
	Verdict  Verdict     `json:"verdict"`
	Sessions int         `json:"sessions"` // counted, baseline included
	// SessionsRun finished, counted or not (a wave runs whole until its
	// counted prefix is done).
	SessionsRun int  `json:"sessions_run"`
	Complete    bool `json:"complete"` // every arm has a decision
}

// ArmReport is one arm's line.
type ArmReport struct {
	Name      string              `json:"name"`
	Flags     []string            `json:"flags"`
	Sessions  int                 `json:"sessions"`
	Run       int                 `json:"sessions_run"`
	Corrupted int                 `json:"corrupted"`
	Rate      float64             `json:"rate"`
	Wilson95  [2]float64          `json:"wilson95"`
	Last      *Look               `json:"last_look,omitempty"`
	Decision  Decision            `json:"decision"`
	Error     string              `json:"error,omitempty"`
	Confounds []sessions.Confound `json:"confounds"`
	Bundles   []string            `json:"bundles"`
}

// Verdict sorts the arms by what the evidence says.
type Verdict struct {
	Removes    []string `json:"removes"`    // fewer corrupted sessions, significant, no confound
	Confounded []string `json:"confounded"` // would remove it, but something else differs too
	Nothing    []string `json:"does_not_remove"`
	CannotTell []string `json:"could_not_tell"`
	Failed     []string `json:"failed"`
	Text       string   `json:"text"`
}

// NewReport summarizes a state.
func NewReport(p *Plan, st *State, out string) Report {
	r := Report{Plan: p.Path, Out: out, Engine: p.Server.Engine, Design: p.Design(), Complete: true}
	for i, a := range st.Arms {
		k, n := a.Corrupted(), len(a.Sessions)
		ar := ArmReport{Name: a.Name, Flags: a.Flags, Sessions: n, Corrupted: k, Decision: a.Decision, Error: a.Error,
			Confounds: a.Confounds, Bundles: []string{}}
		if ar.Confounds == nil {
			ar.Confounds = []sessions.Confound{}
		}
		if n > 0 {
			ar.Rate = float64(k) / float64(n)
		}
		ar.Wilson95[0], ar.Wilson95[1] = outcome.Wilson(k, n, outcome.Z95)
		if len(a.Looks) > 0 {
			l := a.Looks[len(a.Looks)-1]
			ar.Last = &l
		}
		for _, s := range a.Segments {
			if s.Bundle != "" {
				ar.Bundles = append(ar.Bundles, s.Bundle)
			}
			ar.Run += s.Started
		}
		r.Sessions += n
		r.SessionsRun += ar.Run
		r.Arms = append(r.Arms, ar)
		if i == 0 {
			continue
		}
		v := &r.Verdict
		switch a.Decision {
		case Removes:
			if len(a.Confounds) > 0 || !a.ConfoundsChecked {
				v.Confounded = append(v.Confounded, a.Name)
			} else {
				v.Removes = append(v.Removes, a.Name)
			}
		case Nothing:
			v.Nothing = append(v.Nothing, a.Name)
		case CannotTell:
			v.CannotTell = append(v.CannotTell, a.Name)
		case Failed:
			v.Failed = append(v.Failed, a.Name)
		default:
			r.Complete = false
		}
	}
	r.Verdict.Text = r.verdictText()
	return r
}

func (r Report) verdictText() string {
	v := r.Verdict
	var parts []string
	base := r.Arms[0]
	if base.Sessions > 0 && base.Corrupted == 0 {
		parts = append(parts, fmt.Sprintf("the baseline showed no corruption in %d sessions, so no arm can remove any: check the workload reproduces the bug before bisecting", base.Sessions))
	}
	if len(v.Removes) > 0 {
		parts = append(parts, fmt.Sprintf("removes it: %s", strings.Join(v.Removes, ", ")))
	}
	if len(v.Confounded) > 0 {
		parts = append(parts, fmt.Sprintf("fewer corrupted sessions but confounded (something else differed too, or the arm's statistics were not at hand to check; see its confounds): %s", strings.Join(v.Confounded, ", ")))
	}
	if len(v.Nothing) > 0 {
		parts = append(parts, fmt.Sprintf("does not remove it (no reduction of %.0f points or more): %s", 100*r.Design.MinEffect, strings.Join(v.Nothing, ", ")))
	}
	if len(v.CannotTell) > 0 {
		parts = append(parts, fmt.Sprintf("could not tell within the budget of %d sessions (raise stats.budget, or accept a larger min_effect): %s", r.Design.Budget, strings.Join(v.CannotTell, ", ")))
	}
	if len(v.Failed) > 0 {
		parts = append(parts, fmt.Sprintf("failed to run (see each arm's error): %s", strings.Join(v.Failed, ", ")))
	}
	if !r.Complete {
		parts = append(parts, "not finished: resume with --resume")
	}
	if len(parts) == 0 {
		return "no arms"
	}
	return strings.Join(parts, "; ")
}

// WriteText prints the table of arms, the verdict and where the evidence is.
func (r Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ARM\tFLAGS\tCORRUPTED\tRATE [95% CI]\tP (LEVEL)\tDECISION\tCONFOUNDS")
	for i, a := range r.Arms {
		p, dec := "-", string(a.Decision)
		if a.Last != nil {
			p = fmt.Sprintf("%s (%s)", sessions.FormatP(a.Last.P), sessions.FormatP(a.Last.PLevel))
		}
		if i == 0 {
			dec = "baseline"
			if a.Decision == Failed {
				dec = "failed"
			}
		} else if dec == "" {
			dec = "not finished"
		}
		flags := ShellQuoteDisplay(a.Flags)
		if i > 0 {
			flags = ShellQuoteDisplay(a.Flags[len(r.Arms[0].Flags):])
		}
		if flags == "" {
			flags = "(defaults)"
		}
		conf := "-"
		if len(a.Confounds) > 0 {
			names := make([]string, len(a.Confounds))
			for j, c := range a.Confounds {
				names[j] = c.Name
			}
			conf = strings.Join(names, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%.1f%% [%.1f%%, %.1f%%]\t%s\t%s\t%s\n", a.Name, flags, a.Corrupted, a.Sessions,
			100*a.Rate, 100*a.Wilson95[0], 100*a.Wilson95[1], p, dec, conf)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range r.Arms {
		if a.Error != "" {
			fmt.Fprintf(w, "\n%s failed: %s\n", a.Name, a.Error)
		}
	}
	arms := len(r.Arms) - 1
	armSessions := r.Sessions - r.Arms[0].Sessions
	fmt.Fprintf(w, "\nsessions: %d counted (baseline %d; arms %.1f on average, budget %d each); %d run in all (a wave of concurrent sessions runs until its counted prefix has finished)\n",
		r.Sessions, r.Arms[0].Sessions, float64(armSessions)/float64(max(arms, 1)), r.Design.Budget, r.SessionsRun)
	fmt.Fprintf(w, "verdict: %s\n", r.Verdict.Text)
	if r.Out != "" {
		fmt.Fprintf(w, "evidence: %s (one bundle per arm segment; state in %s)\n", r.Out, StateFile)
	}
	return nil
}
