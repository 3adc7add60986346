package report

import (
	"fmt"
	"html"
	"io"
	"strconv"
	"strings"
)

// mdCell makes text safe in a Markdown table cell: control characters
// visible, markup escaped as HTML entities, pipes and newlines neutralised.
func mdCell(s string) string {
	s = html.EscapeString(Visible(s))
	r := strings.NewReplacer("|", `\|`, "\n", " ", "\t", " ", "`", "&#96;", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`)
	return r.Replace(s)
}

// WriteMarkdown writes the report as GitHub-flavoured Markdown (for an
// issue): the same sections as the HTML form, with the plots' data as
// tables (GitHub does not render inline SVG).
func (rep *Report) WriteMarkdown(w io.Writer) error {
	v := rep.view()
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("## kvcanary report\n\n")
	for _, r := range v.Runs {
		p("- run %d `%s`\n", r.N, strings.ReplaceAll(Visible(r.Run.Label), "`", "'"))
	}
	p("\n### 1. Headline: corruption rate\n\n")
	for _, r := range v.Runs {
		p("- **run %d**: %s\n", r.N, mdCell(r.Headline)) // a damaged or truncated bundle: the headline says PARTIAL
	}
	r0 := v.Runs[0]
	run := r0.Run
	p("\n### 2. The three layers (run 1)\n\n")
	for _, vd := range r0.Verdicts {
		mark := map[string]string{StateFault: "❌", StateClean: "✅", StatePartial: "⚠️"}[vd.State]
		if mark == "" {
			mark = "❔"
		}
		p("#### %s\n\n%s %s\n\n", vd.Title, mark, mdCell(vd.Text))
		switch vd.Layer {
		case "transfer":
			if len(run.Mismatches) > 0 {
				p("| room | page-table entries | tokens |\n|---|---|---|\n")
				for _, m := range run.Mismatches {
					p("| %s | %s | %s |\n", mdCell(m.Room), mdCell(m.Pages), mdCell(m.Tokens))
				}
				more(&b, len(run.Mismatches), run.MismatchTotal)
			}
		case "buffer":
			if len(run.Overwrites) > 0 {
				p("| step | page | victim request | phase |\n|---|---|---|---|\n")
				for _, o := range run.Overwrites {
					p("| %s | %s | %s | %s |\n", mdCell(o.Step), mdCell(o.Page), mdCell(o.Victim), mdCell(o.Phase))
				}
				more(&b, len(run.Overwrites), run.OverwriteTotal)
			}
		case "compute":
			if len(run.Divergent) > 0 {
				p("| step | batch size | request | session | top-k Jaccard |\n|---|---|---|---|---|\n")
				for _, d := range run.Divergent {
					bs := "unknown"
					if d.BS > 0 {
						bs = strconv.Itoa(d.BS)
					}
					p("| %d | %s | %s | %s | %s |\n", d.Step, bs, mdCell(d.Request), mdCell(d.Session), jaccardText(d.Jaccard))
				}
				more(&b, len(run.Divergent), run.DivergentTotal)
			}
		}
	}
	if len(r0.Leaks) > 0 {
		p("#### Corrupted sessions and what they said (%d of %d, quoted)\n\n", len(r0.Leaks), run.LeakTotal)
		for _, l := range r0.Leaks {
			p("- **%s** %s", mdCell(l.Session), mdCell(l.Outcome))
			if l.Round > 0 {
				p(" in round %d", l.Round)
			}
			if l.Reason != "" {
				p(": %s", mdCell(l.Reason))
			}
			p("\n")
			if l.Excerpt != "" {
				p("\n<pre>%s</pre>\n\n", html.EscapeString(l.Excerpt))
			}
		}
	}
	p("\n### 3. A/B comparisons against run 1\n\n")
	if len(v.AB) == 0 {
		p("One run given: nothing to compare.\n")
	} else {
		p("| runs | corrupted | Fisher p | flag under test | confounds | verdict |\n|---|---|---|---|---|---|\n")
		for _, ab := range v.AB {
			a, bb := ab.Res.A.Summary, ab.Res.B.Summary
			conf := "none"
			if len(ab.Confounds) > 0 {
				conf = strings.Join(ab.Confounds, "; ")
			}
			p("| run %d → run %d | %d/%d → %d/%d (%s → %s) | %s | %s | %s | %s |\n", ab.A, ab.B,
				a.CorruptedSessions, a.Sessions, bb.CorruptedSessions, bb.Sessions, pct(a.CorruptionRate), pct(bb.CorruptionRate),
				ab.P, mdCell(ab.Flag), mdCell(conf), mdCell(ab.Res.Report.Verdict))
		}
	}
	p("\n### 4. Plots (data)\n\nThe HTML form (`kvcanary report … -o report.html`) draws these; here are their numbers.\n\n")
	if run.GraphDiff != nil && len(run.Batches) > 0 {
		p("**graph≠eager steps by batch size** (run 1)\n\n| batch size | steps | graph | diverging |\n|---|---|---|---|\n")
		for _, bt := range run.Batches {
			p("| %d | %d | %d | %d |\n", bt.BS, bt.Steps, bt.Graph, bt.Divergent)
		}
		p("\n")
	} else {
		p("graph≠eager by batch size: not measured (needs replay and graphdiff.sample events).\n\n")
	}
	if len(run.Jaccards) > 0 {
		var bins [10]int
		for _, j := range run.Jaccards {
			bins[min(int(j*10), 9)]++
		}
		p("**top-k Jaccard of divergent samples** (run 1)")
		if n := run.JaccardsSampled.Note("stated Jaccard values"); n != "" {
			p(" — %s", n)
		}
		p("\n\n| Jaccard | samples |\n|---|---|\n")
		for i, n := range bins {
			p("| %.1f–%.1f | %d |\n", float64(i)/10, float64(i+1)/10, n)
		}
		p("\n")
	}
	if run.SchedSampled.Total > 0 {
		p("**scheduler pressure** (run 1): peak %d running requests, peak KV token usage %s, %d retraction observations.\n\n",
			run.PeakRunning, pct(run.PeakTokenUsage), run.RetractObserved)
	}
	for _, n := range []string{run.SchedSampled.Note("scheduler observations"), run.SessionEndsSampled.Note("session ends")} {
		if n != "" {
			p("The HTML form's plots over time show %s.\n\n", n)
		}
	}
	p("### 5. Run settings and where they came from\n\n")
	for _, r := range v.Runs {
		p("<details><summary>run %d settings</summary>\n\n| setting | value | provenance |\n|---|---|---|\n", r.N)
		for _, s := range r.Settings {
			p("| %s | %s | %s |\n", mdCell(s.Name), mdCell(s.Value), mdCell(s.Provenance))
		}
		p("\n</details>\n\n")
	}
	p("### 6. Re-check\n\n")
	if rep.BundlesGone != "" {
		p("%s\n", mdCell(rep.BundlesGone))
	} else {
		p("```sh\n")
		for _, c := range v.Commands {
			p("%s\n", strings.ReplaceAll(Visible(c), "```", "'''"))
		}
		p("```\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func more(b *strings.Builder, shown, total int) {
	if total > shown {
		fmt.Fprintf(b, "\nfirst %d of %d\n", shown, total)
	}
	b.WriteString("\n")
}
