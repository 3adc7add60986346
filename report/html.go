package report

import (
	"fmt"
	"html/template"
	"io"
	"strconv"

	"github.com/kvcanary/kvcanary/sessions"
)

// view is what the templates read.
type view struct {
	Rep      *Report
	Runs     []runView
	AB       []abView
	Plots    []Plot
	Commands []string
}

type runView struct {
	N        int
	Run      *Run
	Headline string
	Verdicts []Verdict
	Settings []Setting
	Leaks    []Leak // excerpts made visible (Visible)
}

type abView struct {
	A, B      int
	Res       ABResult
	P         string
	Flag      string
	Confounds []string
}

func (rep *Report) view() view {
	v := view{Rep: rep, Commands: rep.Commands()}
	for i, r := range rep.Runs {
		rv := runView{N: i + 1, Run: r, Headline: r.Headline(), Verdicts: r.Verdicts(), Settings: r.Settings()}
		for _, l := range r.Leaks {
			l.Excerpt, l.Reason = Visible(l.Excerpt), Visible(l.Reason)
			rv.Leaks = append(rv.Leaks, l)
		}
		v.Runs = append(v.Runs, rv)
	}
	for i, ab := range rep.AB {
		av := abView{A: 1, B: i + 2, Res: ab, P: fmtP(ab.Report.FisherP), Flag: "none inferred"}
		if f := ab.Report.FlagUnderTest; f != nil {
			av.Flag = f.Name + ": " + valueText(f.A) + " → " + valueText(f.B)
		}
		for _, c := range ab.Report.Confounds {
			av.Confounds = append(av.Confounds, c.Name+": "+valueText(c.A)+" → "+valueText(c.B))
		}
		v.AB = append(v.AB, av)
	}
	return v
}

func fmtP(p float64) string { return sessions.FormatP(p) }

func valueText(v any) string {
	switch x := v.(type) {
	case nil:
		return "unknown"
	case string:
		if x == "" {
			return `""`
		}
		return x
	case float64:
		return strconv.FormatFloat(x, 'g', 4, 64)
	case *bool:
		if x == nil {
			return "unknown"
		}
		return strconv.FormatBool(*x)
	}
	return fmt.Sprint(v)
}

var funcs = template.FuncMap{
	"pct":     pct,
	"jaccard": func(j float64) string { return jaccardText(j) },
}

func jaccardText(j float64) string {
	if j < 0 {
		return "not stated"
	}
	return strconv.FormatFloat(j, 'f', 3, 64)
}

var htmlTmpl = template.Must(template.New("report").Funcs(funcs).Parse(htmlSource))

// WriteHTML writes the report as one self-contained HTML page.
func (rep *Report) WriteHTML(w io.Writer) error {
	v := rep.view()
	v.Plots = rep.Plots()
	return htmlTmpl.Execute(w, v)
}

const htmlSource = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>kvcanary report — {{(index .Runs 0).Run.Label}}</title>
<style>
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1000px;margin:1.5em auto;padding:0 1em;color:#1b1b1b}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;font-size:.92em}td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4}.fault{color:#b71c1c;font-weight:600}.clean{color:#1b5e20;font-weight:600}.unknown{color:#6d6d6d;font-style:italic}
.headline{font-size:1.15em;margin:.3em 0}.verdict{border-left:4px solid #ccc;padding:.2em .8em;margin:.8em 0}
.v-fault{border-color:#b71c1c}.v-clean{border-color:#2e7d32}pre{background:#f6f6f6;padding:.6em;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
figure{margin:1em 0}figcaption{font-size:.9em;color:#444}svg{max-width:100%;height:auto}code{background:#f3f3f3;padding:0 .2em}
.small{font-size:.85em;color:#555}
</style>
</head>
<body>
<h1>kvcanary report</h1>
<p class="small">{{len .Runs}} run(s): {{range $i, $r := .Runs}}{{if $i}}, {{end}}run {{$r.N}} <code>{{$r.Run.Label}}</code>{{end}}. Run 1 is the subject; the others are compared against it.</p>

<section id="headline">
<h2>1. Headline: corruption rate</h2>
{{range .Runs}}<p class="headline" id="headline-run{{.N}}"><b>run {{.N}}</b> <code>{{.Run.Label}}</code>: {{.Headline}}</p>
{{end}}</section>

<section id="verdicts">
<h2>2. The three layers (run 1)</h2>
{{with index .Runs 0}}{{$r := .Run}}{{range .Verdicts}}
<div class="verdict {{if eq .State "fault"}}v-fault{{else if eq .State "clean"}}v-clean{{else}}v-unknown{{end}}" id="verdict-{{.Layer}}">
<h3>{{.Title}}</h3>
<p class="{{if eq .State "fault"}}fault{{else if eq .State "clean"}}clean{{else}}unknown{{end}}">{{.Text}}</p>
{{if eq .Layer "transfer"}}{{if $r.Mismatches}}<table><tr><th>room</th><th>page-table entries</th><th>tokens</th><th>finding</th></tr>
{{range $r.Mismatches}}<tr><td>{{.Room}}</td><td>{{.Pages}}</td><td>{{.Tokens}}</td><td>{{.Summary}}</td></tr>
{{end}}</table>{{if gt $r.MismatchTotal (len $r.Mismatches)}}<p class="small">first {{len $r.Mismatches}} of {{$r.MismatchTotal}}</p>{{end}}{{end}}{{end}}
{{if eq .Layer "buffer"}}{{if $r.Overwrites}}<table><tr><th>step</th><th>page</th><th>victim request</th><th>phase</th></tr>
{{range $r.Overwrites}}<tr><td>{{.Step}}</td><td>{{.Page}}</td><td>{{.Victim}}</td><td>{{.Phase}}</td></tr>
{{end}}</table>{{if gt $r.OverwriteTotal (len $r.Overwrites)}}<p class="small">first {{len $r.Overwrites}} of {{$r.OverwriteTotal}}</p>{{end}}{{end}}{{end}}
{{if eq .Layer "compute"}}{{if $r.Divergent}}<table><tr><th>step</th><th>batch size</th><th>request</th><th>session</th><th>top-k Jaccard</th></tr>
{{range $r.Divergent}}<tr><td>{{.Step}}</td><td>{{if .BS}}{{.BS}}{{else}}unknown{{end}}</td><td>{{.Request}}</td><td>{{.Session}}</td><td>{{jaccard .Jaccard}}</td></tr>
{{end}}</table>{{if gt $r.DivergentTotal (len $r.Divergent)}}<p class="small">first {{len $r.Divergent}} of {{$r.DivergentTotal}}</p>{{end}}{{end}}{{end}}
</div>{{end}}
{{if .Leaks}}<h3 id="leaks">Corrupted sessions and what they said ({{len .Leaks}} of {{$r.LeakTotal}}, quoted)</h3>
{{range .Leaks}}{{if or .Reason .Excerpt}}<p><b>{{.Session}}</b> {{.Outcome}}{{if .Round}} in round {{.Round}}{{end}}{{if .Reason}}: {{.Reason}}{{end}}</p>
{{if .Excerpt}}<pre class="leak">{{.Excerpt}}</pre>{{end}}
{{end}}{{end}}<p class="small">{{range $i, $l := .Leaks}}{{if not (or $l.Reason $l.Excerpt)}}<b>{{$l.Session}}</b> {{$l.Outcome}}; {{end}}{{end}}</p>
{{end}}{{end}}
</section>

<section id="ab">
<h2>3. A/B comparisons against run 1</h2>
{{if .AB}}<table><tr><th>runs</th><th>corrupted</th><th>Fisher p</th><th>flag under test</th><th>confounds</th><th>verdict</th></tr>
{{range .AB}}<tr><td>run {{.A}} → run {{.B}} <code>{{.Res.B.Label}}</code></td><td>{{.Res.A.Summary.CorruptedSessions}}/{{.Res.A.Summary.Sessions}} → {{.Res.B.Summary.CorruptedSessions}}/{{.Res.B.Summary.Sessions}} ({{pct .Res.A.Summary.CorruptionRate}} → {{pct .Res.B.Summary.CorruptionRate}})</td><td>{{.P}}</td><td>{{.Flag}}</td><td>{{if .Confounds}}{{range $i, $c := .Confounds}}{{if $i}}; {{end}}{{$c}}{{end}}{{else}}none{{end}}</td><td>{{.Res.Report.Verdict}}</td></tr>
{{end}}</table>{{else}}<p class="unknown">one run given: nothing to compare (give the A/B arms' bundles after the subject's)</p>{{end}}
</section>

<section id="plots">
<h2>4. Plots</h2>
{{range .Plots}}<figure id="{{.ID}}"><figcaption>{{.Title}}{{if .Note}} <span class="small">({{.Note}})</span>{{end}}</figcaption>
{{if .SVG}}{{.SVG}}{{else}}<p class="unknown">{{.Missing}}</p>{{end}}</figure>
{{end}}</section>

<section id="settings">
<h2>5. Run settings and where they came from</h2>
{{range .Runs}}<h3>run {{.N}} <code>{{.Run.Label}}</code></h3>
<table><tr><th>setting</th><th>value</th><th>provenance</th></tr>
{{range .Settings}}<tr><td>{{.Name}}</td><td{{if eq .Value "unknown"}} class="unknown"{{end}}>{{.Value}}</td><td>{{.Provenance}}</td></tr>
{{end}}</table>
<p class="small">{{.Run.Events}} events{{if .Run.Skipped}}, {{.Run.Skipped}} damaged records skipped{{end}}. Provenance: server = reported by the server, label = stated by the user, twin = the twin's own configuration, — = not stated.</p>
{{end}}</section>

<section id="commands">
<h2>6. Re-check</h2>
{{if .Rep.BundlesGone}}<p class="unknown" id="bundles-gone">{{.Rep.BundlesGone}}</p>{{else}}<pre>{{range .Commands}}{{.}}
{{end}}</pre>{{end}}
</section>
</body>
</html>
`
