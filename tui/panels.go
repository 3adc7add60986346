package tui

import (
	"fmt"
	"math"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// What a panel with no data says: not a zero, which would claim a
// measurement, but what would produce the data.
const (
	needsSessions    = "not measured — needs repro or the twin"
	needsEngineHooks = "not measured — needs kvcanary wrap or the twin"
	needsSchedLines  = "not measured — needs the server's log (repro --server-log, logs) or the twin"
)

// StateMsg hands every panel the frame's State. The model sends it once a
// frame unless the view is paused.
type StateMsg struct{ State *State }

// panelBase is what every panel holds: its styles, size, focus and the last
// State it was given.
type panelBase struct {
	st      *Styles
	w, h    int
	focused bool
	s       *State
}

// SetSize sets the panel's outer size, border included.
func (p *panelBase) SetSize(w, h int) { p.w, p.h = w, h }

// SetFocus marks the panel focused (a double border).
func (p *panelBase) SetFocus(f bool) { p.focused = f }

func (p *panelBase) take(msg tea.Msg) {
	if m, ok := msg.(StateMsg); ok && m.State != nil {
		p.s = m.State
	}
}

// sparkCells is how many cells sparkRow gives the line of a series beside
// label (the time span the panel's axis caption states).
func (p *panelBase) sparkCells(label string, vals []float64, top float64) int {
	sw, _ := sparkGeom(label, vals, p.w-2, top)
	return sw
}

// notMeasured is a no-data line, wrapped to the panel so what would
// produce the data is never cut off.
func (p *panelBase) notMeasured(why string) []string {
	ls := wrap(why, max(1, p.w-2))
	for i, l := range ls {
		ls[i] = p.st.Muted.Render(l)
	}
	return ls
}

func (p *panelBase) num(label string, v any) string {
	return p.st.Label.Render(label) + " " + p.st.Value.Render(fmt.Sprint(v))
}

// ---------------------------------------------------------------------------

// HeaderPanel is the top lines: source, run configuration, elapsed time,
// event rate and dropped events.
type HeaderPanel struct {
	panelBase
	title  string
	paused bool
}

// NewHeaderPanel returns the header; title is the program's name line.
func NewHeaderPanel(st *Styles, title string) *HeaderPanel {
	return &HeaderPanel{panelBase: panelBase{st: st}, title: title}
}

// Update takes StateMsg.
func (p *HeaderPanel) Update(msg tea.Msg) (*HeaderPanel, tea.Cmd) {
	p.take(msg)
	return p, nil
}

// Height is the number of lines View draws.
func (p *HeaderPanel) Height() int { return 3 }

// View draws the header: each line keeps, in order of importance, the
// items that fit whole and says how many it left out ("+2 more"); the help
// overlay lists those.
func (p *HeaderPanel) View() string {
	ls := p.Lines()
	out := make([]string, len(ls))
	for i, items := range ls {
		line, _ := fitItems(p.st, items, p.w)
		out[i] = fit(line, p.w)
	}
	return strings.Join(out, "\n")
}

// LeftOut are the header items View leaves out at the panel's width.
func (p *HeaderPanel) LeftOut() []string {
	var out []string
	for _, items := range p.Lines() {
		_, left := fitItems(p.st, items, p.w)
		out = append(out, left...)
	}
	return out
}

// Lines are the header's three lines as items, most important first: what
// runs (title, source, run, hosts, the producer's tool), how it is
// configured, and how the stream goes.
func (p *HeaderPanel) Lines() [3][]string {
	st, s := p.st, p.s
	if s == nil {
		s = &State{}
	}
	// The title, PAUSED and the source are one item: always on screen (a
	// source too long for the line is clipped, not left out).
	first := st.Title.Render(p.title)
	if p.paused {
		paused := "PAUSED (ingest continues)"
		if p.w < 100 {
			paused = "PAUSED" // the help overlay says ingest continues
		}
		first += "  " + st.Warn.Render(paused)
	}
	l1 := []string{first + "  " + st.Label.Render("source") + " " + s.Source}
	if s.Run != "" {
		l1 = append(l1, p.num("run", s.Run))
	}
	if sl := sourcesLine(st, s.Sources); sl != "" {
		l1 = append(l1, sl) // several hosts or roles: grouped, instead of one host
	} else if s.Host != "" {
		l1 = append(l1, p.num("host", s.Host))
	}
	if s.Tool != "" {
		l1 = append(l1, st.Muted.Render(s.Tool))
	}
	l2 := []string{st.Muted.Render("no run.start yet: configuration unknown")}
	if c := s.Config; c != nil {
		l2 = configItems(st, c)
	}
	drop := st.OK.Render("0")
	if d := s.Dropped + s.ProducerDropped; d > 0 {
		drop = st.Warn.Render(fmt.Sprintf("%s (view %s, producers %s)", human(d), human(s.Dropped), human(s.ProducerDropped)))
	}
	l3 := []string{p.num("elapsed", s.Elapsed.Round(time.Second)), p.num("events", human(s.Events)),
		p.num("events/s", humanRate(s.Rate)), st.Label.Render("dropped") + " " + drop}
	if s.SourceErr != "" {
		l3 = append(l3, st.Mismatch.Render("source: "+s.SourceErr))
	}
	if c := s.Cursor; c != nil {
		l3 = append(l3, cursorLine(st, c, p.w))
	} else if s.SourceDone {
		l3 = append(l3, st.Muted.Render("source finished"))
	}
	if s.SourceStatus != "" {
		l3 = append(l3, st.Muted.Render(s.SourceStatus))
	}
	return [3][]string{l1, l2, l3}
}

// fitItems joins items two spaces apart in w cells, in order, up to the
// first that does not fit whole: that one and the rest are left out (never
// cut) and the line says how many. The first item is always there (the
// caller's fit clips it).
func fitItems(st *Styles, items []string, w int) (string, []string) {
	if len(items) == 0 {
		return "", nil
	}
	line, lw := items[0], ansi.StringWidth(items[0])
	for i := 1; i < len(items); i++ {
		room := w
		if i < len(items)-1 {
			room -= 2 + len(moreNote(len(items)-i)) // what follows may not fit: keep room to say so
		}
		iw := ansi.StringWidth(items[i])
		if lw+2+iw > room {
			return line + "  " + st.Muted.Render(moreNote(len(items)-i)), items[i:]
		}
		line, lw = line+"  "+items[i], lw+2+iw
	}
	return line, nil
}

// moreNote says how many header items a narrow terminal left out.
func moreNote(n int) string { return fmt.Sprintf("+%d more", n) }

// configItems is the run configuration as header items: the settings the
// corruption depends on first, the workload last.
func configItems(st *Styles, c *hook.RunConfig) []string {
	onoff := func(b *bool) string {
		switch {
		case b == nil:
			return "unknown" // not reported, not labelled: never shown as off
		case *b:
			return "on"
		}
		return "off"
	}
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, st.Label.Render(k)+" "+v)
		}
	}
	add("engine", quoteAll(c.Engine))
	if len(c.Inject) > 0 {
		parts = append(parts, st.Warn.Render("inject "+quoteAll(strings.Join(c.Inject, ","))))
	}
	add("index-k", quoteAll(c.IndexKDtype))
	g := onoff(c.CUDAGraph)
	if c.CUDAGraph != nil && *c.CUDAGraph && c.CUDAGraphMaxBS > 0 {
		g += fmt.Sprintf(" (max bs %d)", c.CUDAGraphMaxBS)
	}
	add("graph", g)
	add("overlap", onoff(c.MultiStreamOverlap))
	add("disagg", quoteAll(c.Disaggregation))
	if c.MaxRunningRequests > 0 {
		add("max-running", fmt.Sprint(c.MaxRunningRequests))
	}
	if c.Sessions > 0 {
		add("sessions", fmt.Sprintf("%d×%d", c.Sessions, max(c.Rounds, 1)))
	}
	if c.Sessions > 0 || c.Engine == "sim" {
		// The seed picks a workload (the twin's, repro's tasks): a run
		// without one (an engine under wrap) has no seed to show.
		add("seed", fmt.Sprint(c.Seed))
	}
	return parts
}

// configLine is the configuration on one line.
func configLine(st *Styles, c *hook.RunConfig) string { return strings.Join(configItems(st, c), "  ") }

func cursorLine(st *Styles, c *CursorState, w int) string {
	// In float64: a bundle can hold ts_ns -5 and 2^63-1 (recorded before the
	// collector refused them), whose int64 difference overflows.
	span := (float64(c.LastTS) - float64(c.FirstTS)) / 1e9
	at := (float64(c.AtTS) - float64(c.FirstTS)) / 1e9
	if c.AtTS == 0 {
		at = 0
	}
	speed := "max"
	if c.Speed > 0 {
		speed = fmt.Sprintf("×%g", c.Speed)
	}
	bw := 10
	if w >= 140 {
		bw = 20
	}
	n := 0
	if span > 0 && at > 0 {
		n = int(math.Round(math.Min(at/span, 1) * float64(bw)))
	}
	done := ""
	if c.Done {
		done = " done"
	}
	return st.Label.Render("replay") + fmt.Sprintf(" %.1fs/%.1fs %s [", at, span, speed) +
		st.Spark.Render(strings.Repeat("=", max(0, min(n, bw)))) + strings.Repeat(" ", max(0, bw-n)) + "]" + done
}

// ---------------------------------------------------------------------------

// SessionsPanel shows session outcomes, the corruption rate with its 95%
// Wilson interval and sessions finished per second.
type SessionsPanel struct{ panelBase }

// NewSessionsPanel returns the sessions panel.
func NewSessionsPanel(st *Styles) *SessionsPanel { return &SessionsPanel{panelBase{st: st}} }

// Update takes StateMsg.
func (p *SessionsPanel) Update(msg tea.Msg) (*SessionsPanel, tea.Cmd) { p.take(msg); return p, nil }

// View draws the panel.
func (p *SessionsPanel) View() string {
	st, s := p.st, p.s
	var lines []string
	if s == nil || s.Sessions.Total == 0 {
		lines = p.notMeasured(needsSessions)
		return st.frame("sessions", lines, p.w, p.h, p.focused)
	}
	ss := s.Sessions
	n := ss.Total - ss.Unknown
	rate := 0.0
	if n > 0 {
		rate = float64(ss.Corrupted) / float64(n)
	}
	rs := st.OK
	if ss.Corrupted > 0 {
		rs = st.Mismatch
	}
	// Decisive first (the rate, its interval, the corrupted classes); the
	// sparklines are the first rows a short panel drops.
	lines = append(lines, rs.Render(fmt.Sprintf("corrupt %d/%d = %s", ss.Corrupted, n, pct1(rate))))
	items := []string{st.Label.Render("95% CI") + " " + fmt.Sprintf("%.1f–%s", 100*ss.Lo, pct1(ss.Hi)),
		p.outcome(hook.OutcomeLeak, "leak", true), p.outcome(hook.OutcomeNoTool, "no_tool", true), p.outcome(hook.OutcomeError, "error", true),
		p.outcome(hook.OutcomeTimeout, "timeout", true), p.outcome(hook.OutcomeMaxRounds, "maxrounds", false), p.outcome(hook.OutcomeDone, "done", false)}
	lines = append(lines, flow(items, p.w-2)...)
	if ss.Unknown > 0 {
		lines = append(lines, st.Warn.Render(fmt.Sprintf("%d unknown outcome classes", ss.Unknown)))
	}
	lines = append(lines,
		sparkRow(st, "ok/s ", s.SessDone, p.w-2, 0, st.Spark.Render),
		sparkRow(st, "bad/s", s.SessBad, p.w-2, 0, st.Mismatch.Render),
		sparkAxis(st, p.sparkCells("bad/s", s.SessBad, 0)))
	return st.frame(fmt.Sprintf("sessions %d", ss.Total), lines, p.w, p.h, p.focused)
}

func (p *SessionsPanel) outcome(o, label string, bad bool) string {
	n := p.s.Sessions.Outcomes[o]
	v := p.st.Value.Render(fmt.Sprint(n))
	if bad && n > 0 {
		v = p.st.Mismatch.Render(fmt.Sprint(n))
	}
	return p.st.Label.Render(label) + " " + v
}

// ---------------------------------------------------------------------------

// ChecksumPanel shows per-room transfer checksum results.
type ChecksumPanel struct{ panelBase }

// NewChecksumPanel returns the checksum panel.
func NewChecksumPanel(st *Styles) *ChecksumPanel { return &ChecksumPanel{panelBase{st: st}} }

// Update takes StateMsg.
func (p *ChecksumPanel) Update(msg tea.Msg) (*ChecksumPanel, tea.Cmd) { p.take(msg); return p, nil }

// View draws the panel.
func (p *ChecksumPanel) View() string {
	st, s := p.st, p.s
	var lines []string
	switch {
	case s == nil || (s.ChecksumEvents == 0 && (s.Checksum == nil || s.Checksum.Rooms == 0)):
		lines = p.notMeasured(needsEngineHooks)
	case s.Checksum == nil:
		lines = []string{p.num("room digests", human(s.ChecksumEvents)), st.Muted.Render("no checksum analyzer")}
	default:
		c := s.Checksum
		mm := st.OK.Render("0")
		if c.Mismatched > 0 {
			mm = st.Mismatch.Render(fmt.Sprint(c.Mismatched))
		}
		lines = append(lines, flow([]string{st.Label.Render("mismatched") + " " + mm, p.num("rooms", c.Rooms),
			p.num("matched", c.Matched), p.num("missing", c.Missing), p.num("warmup", c.Warmup),
			p.num("digests", human(s.ChecksumEvents))}, p.w-2)...)
		if len(s.Mismatches) == 0 {
			lines = append(lines, st.Muted.Render("no mismatches"))
		} else {
			lines = append(lines, st.Label.Render("latest mismatches"))
			for i := len(s.Mismatches) - 1; i >= 0; i-- {
				lines = append(lines, st.Mismatch.Render(s.Mismatches[i]))
			}
		}
	}
	return st.frame("checksum (transfer)", lines, p.w, p.h, p.focused)
}

// ---------------------------------------------------------------------------

// CanaryPanel shows replay canary classifications.
type CanaryPanel struct{ panelBase }

// NewCanaryPanel returns the canary panel.
func NewCanaryPanel(st *Styles) *CanaryPanel { return &CanaryPanel{panelBase{st: st}} }

// Update takes StateMsg.
func (p *CanaryPanel) Update(msg tea.Msg) (*CanaryPanel, tea.Cmd) { p.take(msg); return p, nil }

// View draws the panel.
func (p *CanaryPanel) View() string {
	st, s := p.st, p.s
	var lines []string
	switch {
	case s == nil || (s.CanaryEvents == 0 && (s.Canary == nil || s.Canary.Replays == 0)):
		lines = p.notMeasured(needsEngineHooks)
	case s.Canary == nil:
		lines = []string{p.num("replays", human(s.CanaryEvents)), st.Muted.Render("no canary analyzer")}
	default:
		c := s.Canary
		cov := []string{p.num("coverage", pct1(c.Coverage))}
		if c.LiveCoverage != nil {
			cov = append(cov, p.num("live", pct1(*c.LiveCoverage)))
		}
		// Overwrites and missing stores between replays (speculative moves,
		// transfers landing) count with the replays': the same corruption.
		lpo := st.OK.Render(fmt.Sprintf("LIVE-PAGE-OVERWRITE %d", c.AllLiveOverwrites()))
		if c.AllLiveOverwrites() > 0 {
			lpo = st.Overwrite.Render(fmt.Sprintf("LIVE-PAGE-OVERWRITE %d", c.AllLiveOverwrites()))
		}
		miss := p.num("missing", c.AllMissingStores())
		if c.AllMissingStores() > 0 {
			miss = st.Label.Render("missing") + " " + st.Mismatch.Render(fmt.Sprint(c.AllMissingStores()))
		}
		// The decisive row first: a short panel keeps it.
		lines = append(lines, lpo)
		lines = append(lines, flow([]string{miss, p.num("replays", human(c.Replays)), p.num("policy", quoteAll(c.Policy))}, p.w-2)...)
		lines = append(lines, flow(cov, p.w-2)...)
		lines = append(lines, flow([]string{p.num("expected", human(c.ExpectedWrites)), p.num("transfer", human(c.BenignTransferWrites)),
			p.num("free", human(c.FreePageWrites)), p.num("held", human(c.HeldPageWrites))}, p.w-2)...)
		if c.RewrittenStores > 0 || c.SlotCheckedReplays > 0 {
			lines = append(lines, p.num("rewritten", human(c.RewrittenStores))+"  "+p.num("slot-checked", human(c.SlotCheckedReplays)))
		}
	}
	return st.frame("canary (buffer)", lines, p.w, p.h, p.focused)
}

// ---------------------------------------------------------------------------

// GraphDiffPanel shows graph-vs-eager samples and the top-k Jaccard histogram.
type GraphDiffPanel struct{ panelBase }

// NewGraphDiffPanel returns the graphdiff panel.
func NewGraphDiffPanel(st *Styles) *GraphDiffPanel { return &GraphDiffPanel{panelBase{st: st}} }

// Update takes StateMsg.
func (p *GraphDiffPanel) Update(msg tea.Msg) (*GraphDiffPanel, tea.Cmd) { p.take(msg); return p, nil }

// View draws the panel.
func (p *GraphDiffPanel) View() string {
	st, s := p.st, p.s
	var lines []string
	switch {
	case s == nil || (s.GraphDiffEvents == 0 && (s.GraphDiff == nil || s.GraphDiff.Samples == 0)):
		lines = p.notMeasured(needsEngineHooks)
	case s.GraphDiff == nil:
		lines = []string{p.num("samples", human(s.GraphDiffEvents)), st.Muted.Render("no graphdiff analyzer")}
	default:
		g := s.GraphDiff
		dv := st.OK.Render("0")
		if g.Divergent > 0 {
			dv = st.Mismatch.Render(fmt.Sprint(g.Divergent))
		}
		lines = append(lines, flow([]string{st.Label.Render("divergent") + " " + dv, p.num("samples", human(uint64(g.Samples)))}, p.w-2)...)
		if g.NoSamplesReason != "" {
			lines = append(lines, st.Muted.Render(quoteAll(g.NoSamplesReason)))
		}
		if len(g.JaccardHist) > 0 {
			lines = append(lines, st.Label.Render("top-k Jaccard (log bars)"))
			top := 0
			lw := 0
			for _, b := range g.JaccardHist {
				top = max(top, b.Count)
				lw = max(lw, len(b.Label))
			}
			bw := max(1, p.w-2-lw-8)
			for i, b := range g.JaccardHist {
				n := 0
				if b.Count > 0 && top > 0 {
					n = max(1, int(math.Round(math.Log1p(float64(b.Count))/math.Log1p(float64(top))*float64(bw))))
				}
				bs := st.Spark
				if i < len(g.JaccardHist)-1 && b.Count > 0 {
					bs = st.Mismatch
				}
				lines = append(lines, fmt.Sprintf("%-*s ", lw, b.Label)+bs.Render(bar(n, bw))+" "+fmt.Sprint(b.Count))
			}
		}
	}
	return st.frame("graphdiff (compute)", lines, p.w, p.h, p.focused)
}

// ---------------------------------------------------------------------------

// SchedPanel shows the scheduler: running requests, token usage, queue and
// retractions, with sparklines.
type SchedPanel struct{ panelBase }

// NewSchedPanel returns the scheduler panel.
func NewSchedPanel(st *Styles) *SchedPanel { return &SchedPanel{panelBase{st: st}} }

// Update takes StateMsg.
func (p *SchedPanel) Update(msg tea.Msg) (*SchedPanel, tea.Cmd) { p.take(msg); return p, nil }

// View draws the panel.
func (p *SchedPanel) View() string {
	st, s := p.st, p.s
	var lines []string
	if s == nil || s.Sched.Observations == 0 {
		lines = p.notMeasured(needsSchedLines)
		return st.frame("scheduler", lines, p.w, p.h, p.focused)
	}
	c := s.Sched
	rt := p.num("retract", c.Retractions)
	if c.Retractions > 0 {
		rt = st.Label.Render("retract") + " " + st.Warn.Render(fmt.Sprintf("%d (%d req)", c.Retractions, c.RetractedReqs))
	}
	lines = append(lines, flow([]string{rt, p.num("running", fmt.Sprintf("%d (peak %d)", c.Latest.RunningReq, c.PeakRunning)),
		p.num("queue", c.Latest.QueueReq), p.num("usage", fmt.Sprintf("%.2f (peak %.2f)", c.Latest.TokenUsage, c.PeakUsage))}, p.w-2)...)
	lines = append(lines,
		sparkRow(st, "running", s.SchedRunning, p.w-2, 0, st.Spark.Render),
		sparkRow(st, "usage  ", s.SchedUsage, p.w-2, 1, st.Spark.Render),
		sparkRow(st, "queue  ", s.SchedQueue, p.w-2, 0, st.Spark.Render),
		st.Label.Render("retract")+" "+st.Warn.Render(marks(s.SchedRetract, p.sparkCells("queue  ", s.SchedQueue, 0))),
		sparkAxis(st, p.sparkCells("queue  ", s.SchedQueue, 0)),
	)
	return st.frame("scheduler", lines, p.w, p.h, p.focused)
}

// ---------------------------------------------------------------------------

// What feeds the panels that no source of the dashboard's own produces.
const (
	feedsGPU  = "kvcanary gpu --emit ADDR"
	feedsCUDA = "kvcanary probe cuda --emit ADDR"
)

// feedStrip is what the unfed GPU and CUDA panels collapse to: one line
// naming the command that feeds each ("" when both are fed). The long form
// when it fits, else both commands behind one label.
func feedStrip(st *Styles, gpuFed, cudaFed bool, w int) []string {
	var long, cmds []string
	if !gpuFed {
		long = append(long, "no GPU samples ("+feedsGPU+" feeds this)")
		cmds = append(cmds, feedsGPU)
	}
	if !cudaFed {
		long = append(long, "no CUDA calls ("+feedsCUDA+" feeds this)")
		cmds = append(cmds, feedsCUDA)
	}
	if len(long) == 0 {
		return nil
	}
	line := strings.Join(long, " · ")
	if len(long) == 2 && ansi.StringWidth(line) > w {
		line = "no GPU/CUDA feed: " + strings.Join(cmds, " · ")
	}
	return []string{fit(st.Muted.Render(line), w)}
}

// GPUPanel shows per-device telemetry, or that there is none.
type GPUPanel struct{ panelBase }

// NewGPUPanel returns the GPU panel.
func NewGPUPanel(st *Styles) *GPUPanel { return &GPUPanel{panelBase{st: st}} }

// Update takes StateMsg.
func (p *GPUPanel) Update(msg tea.Msg) (*GPUPanel, tea.Cmd) { p.take(msg); return p, nil }

// View draws the panel.
func (p *GPUPanel) View() string {
	st, s := p.st, p.s
	if s == nil || s.GPU == nil {
		return st.frame("GPU", p.notMeasured("no GPU samples — "+feedsGPU+" feeds this"), p.w, p.h, p.focused)
	}
	var lines []string
	for _, d := range s.GPU.Devices {
		l := fmt.Sprintf("%d %s/%s %d%% %dC", d.Index, bytesGiB(d.MemUsed), bytesGiB(d.MemTotal), d.UtilGPU, d.TempC)
		if d.Name != "" {
			l += " " + st.Muted.Render(quoteAll(d.Name))
		}
		lines = append(lines, l)
		var bad []string
		if d.ECCDBE > 0 {
			bad = append(bad, fmt.Sprintf("ecc dbe %d", d.ECCDBE))
		}
		if d.Xid != 0 {
			bad = append(bad, fmt.Sprintf("xid %d", d.Xid))
		}
		if d.RemapPending {
			bad = append(bad, "remap pending")
		}
		if len(bad) > 0 {
			lines = append(lines, "  "+st.Mismatch.Render(strings.Join(bad, ", ")))
		}
		if u, ok := s.GPUUtil[d.Index]; ok && p.h-2 > 2*len(s.GPU.Devices)+1 {
			lines = append(lines, sparkRow(st, "  util%", u, p.w-2, 100, st.Spark.Render))
		}
	}
	if len(s.GPU.Devices) == 0 {
		lines = append(lines, st.Muted.Render("sample without devices"))
	}
	title := fmt.Sprintf("GPU (%s samples)", human(s.GPUSamples))
	if drv := " driver " + quoteAll(s.GPU.Driver); s.GPU.Driver != "" && ansi.StringWidth(title+drv) <= p.w-2 {
		title += drv // left out whole on a narrow panel, never cut
	}
	return st.frame(title, lines, p.w, p.h, p.focused)
}

// ---------------------------------------------------------------------------

// CUDAPanel shows driver calls seen by the eBPF probe, or that there is none.
type CUDAPanel struct{ panelBase }

// NewCUDAPanel returns the CUDA panel.
func NewCUDAPanel(st *Styles) *CUDAPanel { return &CUDAPanel{panelBase{st: st}} }

// Update takes StateMsg.
func (p *CUDAPanel) Update(msg tea.Msg) (*CUDAPanel, tea.Cmd) { p.take(msg); return p, nil }

// View draws the panel.
func (p *CUDAPanel) View() string {
	st, s := p.st, p.s
	if s == nil || s.CUDA.Calls == 0 {
		return st.frame("CUDA", p.notMeasured("no CUDA calls — "+feedsCUDA+" feeds this"), p.w, p.h, p.focused)
	}
	c := s.CUDA
	errs := p.num("errors", c.Errors)
	if c.Errors > 0 {
		errs = st.Label.Render("errors") + " " + st.Warn.Render(fmt.Sprint(c.Errors))
	}
	lines := []string{
		p.num("calls", human(c.Calls)) + "  " + p.num("calls/s", humanRate(c.Rate)),
		p.num("graph launches", human(c.GraphLaunches)) + "  " + errs,
		sparkRow(st, "calls/s", s.CUDASpark, p.w-2, 0, st.Spark.Render),
	}
	for _, t := range c.Top {
		lines = append(lines, fmt.Sprintf("%s %s", t.Call, human(t.Count)))
	}
	return st.frame(fmt.Sprintf("CUDA (%d pids)", c.PIDs), lines, p.w, p.h, p.focused)
}
