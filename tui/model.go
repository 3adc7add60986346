package tui

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// Smallest terminal the layout is made for.
const (
	MinWidth  = 80
	MinHeight = 24
)

// DefaultFrameInterval is the time between frames: ingest batches and
// renders happen at most this often (~10 frames a second).
const DefaultFrameInterval = 100 * time.Millisecond

// DefaultLiveCapacity is the live subscription size Watch-like callers
// should use: a little over one frame's worth at a million events a second.
const DefaultLiveCapacity = 1 << 17

// Options configure a dashboard.
type Options struct {
	// Title is the first word of the header ("kvcanary watch").
	Title string
	// Source describes where events come from ("bundle run.kvtrace").
	Source string
	// Run labels the run until a run.start names one (a bundle's manifest run).
	Run string
	// Sub is the bus subscription the dashboard reads. It should be a Live
	// subscription (bus.Live("tui", DefaultLiveCapacity)) so the producer
	// never waits; its drops are shown in the header.
	Sub *hook.Subscription
	// Summaries, when set, returns the analyzers' current summaries (an
	// analyzers.Set's Summaries method; a nil field is an analyzer that does
	// not run, and its panel says "not measured"). It is called from a
	// goroutine of its own a few times a second and must be safe for
	// concurrent use (kvcanary's analyzers are: each guards its state).
	Summaries func() analyzers.Summaries
	// SourceStatus, when set, returns a short line about the source (open
	// connections, sessions finished); it is called from the frame's Cmd and
	// must be safe for concurrent use.
	SourceStatus func() string
	// Steps, when set, carries a guided investigation's steps (the demo);
	// the dashboard shows them in a panel of their own.
	Steps <-chan Step
	// Cursor, when set, is a replay's position, shown in the header.
	Cursor *Cursor
	// Done, when set, delivers the source's end (nil) or failure.
	Done <-chan error
	// SnapshotDir is where `s` writes bundles (default: DefaultSnapshotDir,
	// created on the first snapshot); Manifest is the template of their
	// manifest.
	SnapshotDir string
	Manifest    traces.Manifest
	// WindowEvents and WindowBytes bound the recent events kept for
	// snapshots (defaults DefaultWindowEvents, DefaultWindowBytes).
	WindowEvents int
	WindowBytes  int
	// FrameInterval is the time between frames (default DefaultFrameInterval).
	FrameInterval time.Duration
	// KeepRuns keeps per-run panels across run.start events of new runs
	// (default: a new run clears them; the findings log always stays).
	KeepRuns bool
	// Styles and Keys override the defaults (tests use ASCII styles).
	Styles *Styles
	Keys   *KeyMap
	// Now is the clock (default time.Now).
	Now func() time.Time

	// Run only: the terminal's streams and NO_COLOR.
	In      io.Reader
	Out     io.Writer
	NoColor bool
}

// Cursor is a replay's position: written by the replay, read by the view.
type Cursor struct {
	first, last, at atomic.Int64
	speed           atomic.Uint64 // math.Float64bits
	done            atomic.Bool
}

// State returns the cursor's current position.
func (c *Cursor) State() CursorState {
	return CursorState{FirstTS: c.first.Load(), LastTS: c.last.Load(), AtTS: c.at.Load(),
		Speed: float64frombits(c.speed.Load()), Done: c.done.Load()}
}

// frameMsg is one frame: the events drained since the last one.
type frameMsg struct {
	at        time.Time
	batch     *[]hook.Event
	open      bool
	summaries *analyzers.Summaries // nil when this frame did not poll
	arrived   uint64               // delivered + dropped so far
	dropped   uint64
	status    string // Options.SourceStatus
}

// sourceDoneMsg carries Options.Done.
type sourceDoneMsg struct{ err error }

var batchPool = sync.Pool{New: func() any { b := make([]hook.Event, 0, 4096); return &b }}

// focusable names the panels tab moves between.
type focusable int

const (
	focusSessions focusable = iota
	focusChecksum
	focusCanary
	focusGraphDiff
	focusSched
	focusGPU
	focusCUDA
	focusSteps
	focusFindings
)

// Model is the dashboard: a bubbletea model over a bus subscription.
type Model struct {
	opts Options
	st   *Styles
	keys KeyMap
	help help.Model
	now  func() time.Time

	agg *aggregator
	win *window

	header    *HeaderPanel
	sessions  *SessionsPanel
	checksum  *ChecksumPanel
	canary    *CanaryPanel
	graphdiff *GraphDiffPanel
	sched     *SchedPanel
	gpu       *GPUPanel
	cuda      *CUDAPanel
	steps     *StepsPanel
	findings  *FindingsPanel
	table     *SessionsTable

	order []focusable
	focus int

	w, h      int
	paused    bool
	showHelp  bool
	filtering bool
	filterBuf string
	// panelFilter: the findings filter was set by enter on an analyzer's
	// panel; it is a view of that panel's findings, not a filter the user
	// typed, so leaving the findings panel (tab, esc) clears it.
	panelFilter bool
	status      string
	showStatus  bool // the footer shows status until the next key

	start        time.Time
	frames       uint64
	lastArrived  uint64
	lastAt       time.Time
	rate         float64
	dropped      uint64
	subOpen      bool
	sourceDone   bool
	sourceErr    error
	pollEvery    int
	lastSnapshot string
	snapshotErr  error
	srcStatus    string
	writing      int  // snapshots being written
	gpuFed       bool // GPU samples arrived: the GPU panel has a place in the grid
	cudaFed      bool // CUDA calls arrived: so has the CUDA panel
	strip        []string
	quitting     bool // quit once they are written
}

// quit ends the program, after any snapshot being written is complete.
func (m *Model) quit() tea.Cmd {
	if m.writing > 0 {
		m.quitting = true
		m.status, m.showStatus = "finishing the snapshot, then quitting…", true
		return nil
	}
	return tea.Quit
}

// New returns a dashboard model for opts.
func New(opts Options) *Model {
	if opts.Title == "" {
		opts.Title = "kvcanary"
	}
	if opts.FrameInterval <= 0 {
		opts.FrameInterval = DefaultFrameInterval
	}
	st := opts.Styles
	if st == nil {
		st = NewStyles(nil)
	}
	keys := DefaultKeyMap()
	if opts.Keys != nil {
		keys = *opts.Keys
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	m := &Model{opts: opts, st: st, keys: keys, now: now, subOpen: opts.Sub != nil, w: MinWidth + 40, h: MinHeight + 16}
	m.help = help.New()
	m.help.Styles = help.Styles{
		ShortKey: st.HelpKey, ShortDesc: st.HelpDesc, ShortSeparator: st.Muted,
		FullKey: st.HelpKey, FullDesc: st.HelpDesc, FullSeparator: st.Muted, Ellipsis: st.Muted,
	}
	m.agg = newAggregator(opts.Source)
	m.agg.run = quoteAll(opts.Run)
	m.agg.resetOn = !opts.KeepRuns
	if c := opts.Manifest.Config; !reflect.DeepEqual(c, hook.RunConfig{}) {
		// A bundle's manifest holds its configuration (sim serve writes no
		// run.start): shown until a run.start says otherwise.
		m.agg.config = &c
	}
	m.win = newWindow(opts.WindowEvents, opts.WindowBytes)
	m.header = NewHeaderPanel(st, opts.Title)
	m.sessions = NewSessionsPanel(st)
	m.checksum = NewChecksumPanel(st)
	m.canary = NewCanaryPanel(st)
	m.graphdiff = NewGraphDiffPanel(st)
	m.sched = NewSchedPanel(st)
	m.gpu = NewGPUPanel(st)
	m.cuda = NewCUDAPanel(st)
	m.steps = NewStepsPanel(st)
	m.findings = NewFindingsPanel(st, &m.keys)
	m.table = NewSessionsTable(st, &m.keys)
	m.order = []focusable{focusSessions, focusChecksum, focusCanary, focusGraphDiff, focusSched, focusGPU, focusCUDA}
	if opts.Steps != nil {
		m.order = append(m.order, focusSteps)
	}
	m.order = append(m.order, focusFindings)
	m.focus = len(m.order) - 1
	m.pollEvery = max(1, int(250*time.Millisecond/opts.FrameInterval))
	m.start = now()
	m.lastAt = m.start
	m.layout()
	m.pushState()
	return m
}

// Init starts the frame tick and the waits on steps and the source's end.
func (m *Model) Init() tea.Cmd {
	cmds := []tea.Cmd{m.tick()}
	if m.opts.Steps != nil {
		cmds = append(cmds, waitStep(m.opts.Steps))
	}
	if m.opts.Done != nil {
		cmds = append(cmds, waitDone(m.opts.Done))
	}
	return tea.Batch(cmds...)
}

// tick schedules the next frame. The drain runs in the Cmd's goroutine, so a
// slow Update never holds up the subscription's producer.
func (m *Model) tick() tea.Cmd {
	sub, sums, status := m.opts.Sub, m.opts.Summaries, m.opts.SourceStatus
	poll := m.frames%uint64(m.pollEvery) == 0
	interval := m.opts.FrameInterval
	if sub != nil && !m.subOpen {
		// The source has ended and its last summaries are in: only the
		// clock moves now.
		sums, interval = nil, max(interval, 500*time.Millisecond)
	}
	return tea.Tick(interval, func(t time.Time) tea.Msg {
		f := frameMsg{at: t, open: false}
		if sub != nil {
			b := batchPool.Get().(*[]hook.Event)
			*b, f.open = sub.Drain((*b)[:0])
			f.batch = b
			f.dropped = sub.Dropped()
			f.arrived = sub.Delivered() + f.dropped
		}
		if sums != nil && (poll || !f.open) {
			s := sums()
			f.summaries = &s
		}
		if status != nil {
			f.status = status()
		}
		return f
	})
}

func waitStep(ch <-chan Step) tea.Cmd {
	return func() tea.Msg {
		s, ok := <-ch
		if !ok {
			return stepsDoneMsg{}
		}
		return StepMsg(s)
	}
}

func waitDone(ch <-chan error) tea.Cmd {
	return func() tea.Msg { return sourceDoneMsg{err: <-ch} }
}

// Update handles frames, keys and resizes.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	var cmds []tea.Cmd
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.w, m.h = msg.Width, msg.Height
		m.layout()
	case frameMsg:
		m.ingest(msg)
		cmds = append(cmds, m.tick())
	case StepMsg:
		m.agg.addStep(Step(msg))
		if !m.paused {
			m.pushState()
		}
		cmds = append(cmds, waitStep(m.opts.Steps))
	case stepsDoneMsg:
		m.agg.stepsDone = true
		if !m.paused {
			m.pushState()
		}
	case sourceDoneMsg:
		m.sourceDone, m.sourceErr = true, msg.err
		if !m.paused {
			m.pushState()
		}
	case SnapshotMsg:
		m.writing--
		if msg.Err != nil {
			m.status = "snapshot: " + quoteAll(msg.Err.Error())
			m.snapshotErr = msg.Err
		} else {
			m.status = fmt.Sprintf("snapshot: %d events to %s", msg.Events, quoteAll(msg.Path))
			m.lastSnapshot = msg.Path
		}
		m.showStatus = true
		if m.writing <= 0 && m.quitting {
			return m, tea.Quit
		}
	case tea.KeyMsg:
		if cmd := m.key(msg); cmd != nil {
			cmds = append(cmds, cmd)
		}
	}
	return m, tea.Batch(cmds...)
}

func (m *Model) ingest(f frameMsg) {
	m.frames++
	if f.batch != nil {
		b := *f.batch
		for i := range b {
			m.agg.apply(&b[i])
			m.win.push(b[i])
			b[i] = hook.Event{}
		}
		*f.batch = b[:0]
		batchPool.Put(f.batch)
	}
	m.agg.setSummaries(f.summaries)
	m.subOpen = f.open
	if dt := f.at.Sub(m.lastAt).Seconds(); dt >= 0.5 {
		m.rate = float64(f.arrived-m.lastArrived) / dt
		m.lastArrived, m.lastAt = f.arrived, f.at
	}
	m.dropped = f.dropped
	if f.status != "" {
		m.srcStatus = f.status
	}
	if !m.paused {
		m.pushState()
	}
}

// pushState hands the frame's State to every panel.
func (m *Model) pushState() {
	s := m.agg.snapshot(m.sparkLen())
	s.Elapsed = m.now().Sub(m.start)
	s.Dropped = m.dropped
	s.Rate = m.rate
	if !m.subOpen {
		s.Rate = 0
	}
	s.SourceDone = m.sourceDone || (m.opts.Sub != nil && !m.subOpen)
	s.SourceStatus = quoteAll(m.srcStatus)
	if m.sourceErr != nil {
		s.SourceErr = quoteAll(m.sourceErr.Error())
	}
	if m.opts.Cursor != nil {
		c := m.opts.Cursor.State()
		s.Cursor = &c
	}
	if gf, cf := s.GPU != nil, s.CUDA.Calls > 0; gf != m.gpuFed || cf != m.cudaFed {
		m.gpuFed, m.cudaFed = gf, cf
		m.layout()
	}
	msg := StateMsg{State: &s}
	m.header, _ = m.header.Update(msg)
	m.sessions, _ = m.sessions.Update(msg)
	m.checksum, _ = m.checksum.Update(msg)
	m.canary, _ = m.canary.Update(msg)
	m.graphdiff, _ = m.graphdiff.Update(msg)
	m.sched, _ = m.sched.Update(msg)
	m.gpu, _ = m.gpu.Update(msg)
	m.cuda, _ = m.cuda.Update(msg)
	m.steps, _ = m.steps.Update(msg)
	m.findings, _ = m.findings.Update(msg)
	m.table, _ = m.table.Update(msg)
}

// sparkLen is the longest sparkline any panel draws.
func (m *Model) sparkLen() int { return max(8, min(seriesBuckets, m.w)) }

func (m *Model) key(msg tea.KeyMsg) tea.Cmd {
	if msg.Type == tea.KeyCtrlC {
		return m.quit()
	}
	if m.filtering {
		switch msg.Type {
		case tea.KeyEnter:
			m.filtering = false
		case tea.KeyEsc:
			m.filtering, m.filterBuf = false, ""
		case tea.KeyCtrlU:
			m.filterBuf = ""
		case tea.KeyBackspace:
			if r := []rune(m.filterBuf); len(r) > 0 {
				m.filterBuf = string(r[:len(r)-1])
			}
		case tea.KeyRunes, tea.KeySpace:
			m.filterBuf += string(msg.Runes)
		}
		m.panelFilter = false
		m.findings, _ = m.findings.Update(FilterMsg{Filter: m.filterBuf})
		return nil
	}
	m.showStatus = false
	if m.showHelp {
		if key.Matches(msg, m.keys.Quit) {
			return m.quit()
		}
		m.showHelp = false
		return nil
	}
	if m.findings.Drilled() {
		if key.Matches(msg, m.keys.Quit) {
			return m.quit()
		}
		m.findings, _ = m.findings.Update(msg)
		m.layout()
		return nil
	}
	if m.table.Opened() {
		if key.Matches(msg, m.keys.Quit) {
			return m.quit()
		}
		m.table, _ = m.table.Update(msg)
		return nil
	}
	switch {
	case key.Matches(msg, m.keys.Quit):
		return m.quit()
	case key.Matches(msg, m.keys.Help):
		m.showHelp = true
	case key.Matches(msg, m.keys.Next):
		m.clearPanelFilter()
		m.setFocus(m.nextShown(1))
	case key.Matches(msg, m.keys.Prev):
		m.clearPanelFilter()
		m.setFocus(m.nextShown(len(m.order) - 1))
	case key.Matches(msg, m.keys.Back) && m.findings.Filter() != "":
		// esc clears a filter, typed or set by enter on a panel.
		m.panelFilter, m.filterBuf = false, ""
		m.findings, _ = m.findings.Update(FilterMsg{})
	case key.Matches(msg, m.keys.Filter):
		m.filtering = true
		m.filterBuf = m.findings.Filter()
		m.setFocus(len(m.order) - 1)
	case key.Matches(msg, m.keys.Pause):
		m.paused = !m.paused
		m.header.paused = m.paused
		if !m.paused {
			m.pushState()
		}
	case key.Matches(msg, m.keys.Snapshot):
		m.writing++
		m.status, m.showStatus = "snapshot: writing…", true
		return snapshotCmd(m.opts.SnapshotDir, m.snapshotManifest(), m.win.events(), m.win.evicted, m.figures(), m.now())
	case key.Matches(msg, m.keys.Drill) && m.order[m.focus] == focusSessions:
		// Enter on the sessions panel opens the sessions table.
		m.table.Open()
	case key.Matches(msg, m.keys.Drill) && m.order[m.focus] != focusFindings:
		// Enter on an analyzer's panel lists that analyzer's findings.
		if f := analyzerOf(m.order[m.focus]); f != "" {
			m.findings, _ = m.findings.Update(FilterMsg{Filter: f})
			m.setFocus(len(m.order) - 1)
			m.panelFilter = true
		}
	default:
		m.findings, _ = m.findings.Update(msg)
		m.layout()
	}
	return nil
}

// nextShown is the index of the next panel in the grid, step ahead in the
// focus order (1 next, len-1 previous); unfed panels are skipped.
func (m *Model) nextShown(step int) int {
	i := m.focus
	for range m.order {
		i = (i + step) % len(m.order)
		if m.fed(m.order[i]) {
			return i
		}
	}
	return m.focus
}

// clearPanelFilter drops a filter that enter on an analyzer's panel set.
func (m *Model) clearPanelFilter() {
	if m.panelFilter {
		m.panelFilter = false
		m.findings, _ = m.findings.Update(FilterMsg{})
	}
}

func analyzerOf(f focusable) string {
	switch f {
	case focusChecksum:
		return "checksum"
	case focusCanary:
		return "canary"
	case focusGraphDiff:
		return "graphdiff"
	}
	return ""
}

// figures are the headline numbers a snapshot records in its labels.
func (m *Model) figures() map[string]string {
	a := m.agg
	return map[string]string{
		"events": fmt.Sprint(a.events), "dropped": fmt.Sprint(m.dropped), "producer_dropped": fmt.Sprint(a.prodDropped),
		"sessions": fmt.Sprint(a.sessions), "corrupted": fmt.Sprint(a.corrupted), "findings": fmt.Sprint(a.findingsTotal),
		"findings_error": fmt.Sprint(a.bySev[hook.SevError]),
	}
}

func (m *Model) snapshotManifest() traces.Manifest {
	man := m.opts.Manifest
	if man.Tool == "" {
		man.Tool = m.agg.tool
	}
	if c := m.agg.config; c != nil && man.Config.Engine == "" {
		man.Config = *c
	}
	if man.Run == "" {
		man.Run = m.agg.run
	}
	return man
}

func (m *Model) setFocus(i int) {
	m.focus = i
	f := m.order[i]
	m.sessions.SetFocus(f == focusSessions)
	m.checksum.SetFocus(f == focusChecksum)
	m.canary.SetFocus(f == focusCanary)
	m.graphdiff.SetFocus(f == focusGraphDiff)
	m.sched.SetFocus(f == focusSched)
	m.gpu.SetFocus(f == focusGPU)
	m.cuda.SetFocus(f == focusCUDA)
	m.steps.SetFocus(f == focusSteps)
	m.findings.SetFocus(f == focusFindings)
}

// Focused names the focused panel (tests, the status line).
func (m *Model) Focused() string {
	return [...]string{"sessions", "checksum", "canary", "graphdiff", "scheduler", "gpu", "cuda", "steps", "findings"}[m.order[m.focus]]
}

// grid geometry, computed by layout.
type cell struct {
	x, w int
	ps   []interface{ SetSize(w, h int) } // stacked top to bottom
}

const headerLines, footerLines = 3, 1

// minFindings is the findings panel's height on a short terminal: its title
// and three findings.
const minFindings = 6

// fed reports whether a panel whose feed is optional (GPU telemetry, CUDA
// calls) has had data; an unfed one leaves the grid for a line of the strip.
func (m *Model) fed(f focusable) bool {
	switch f {
	case focusGPU:
		return m.gpuFed
	case focusCUDA:
		return m.cudaFed
	}
	return true
}

// rowHeights splits the body between the two grid rows and the findings:
// on a short terminal the first row (the three layers' decisive panels) gets
// the extra line, and the findings keep minFindings.
func rowHeights(body int) (row1, row2, find int) {
	avail := max(0, body-minFindings)
	row1 = min(10, max(5, (avail+3)/2))
	row2 = min(10, max(4, avail-row1))
	return row1, row2, max(3, body-row1-row2)
}

// layout sizes every panel for the terminal.
func (m *Model) layout() {
	if !m.fed(m.order[m.focus]) {
		m.focus = len(m.order) - 1 // its panel left the grid: back to the findings
	}
	m.setFocus(m.focus)
	w, h := m.w, m.h
	m.header.SetSize(w, headerLines)
	m.strip = feedStrip(m.st, m.gpuFed, m.cudaFed, w)
	body := max(0, h-headerLines-footerLines-len(m.strip))
	row1, row2, findH := rowHeights(body)
	split := func(total, n int) []int {
		ws := make([]int, n)
		for i := range ws {
			ws[i] = total / n
			if i < total%n {
				ws[i]++
			}
		}
		return ws
	}
	var fed []interface{ SetSize(w, h int) }
	if m.gpuFed {
		fed = append(fed, m.gpu)
	}
	if m.cudaFed {
		fed = append(fed, m.cuda)
	}
	if w >= 112 {
		ws := split(w, 4)
		m.sessions.SetSize(ws[0], row1)
		m.checksum.SetSize(ws[1], row1)
		m.canary.SetSize(ws[2], row1)
		m.graphdiff.SetSize(ws[3], row1)
		if len(fed) == 0 {
			m.sched.SetSize(w, row2)
		} else {
			m.sched.SetSize(ws[0]+ws[1], row2)
			for i, fw := range split(ws[2]+ws[3], len(fed)) {
				fed[i].SetSize(fw, row2)
			}
		}
	} else {
		ws := split(w, 3)
		m.sessions.SetSize(ws[0], row1)
		m.checksum.SetSize(ws[1], row1)
		m.canary.SetSize(ws[2], row1)
		switch len(fed) {
		case 0:
			hw := split(w, 2)
			m.graphdiff.SetSize(hw[0], row2)
			m.sched.SetSize(hw[1], row2)
		case 1:
			m.graphdiff.SetSize(ws[0], row2)
			m.sched.SetSize(ws[1], row2)
			fed[0].SetSize(ws[2], row2)
		default:
			m.graphdiff.SetSize(ws[0], row2)
			m.sched.SetSize(ws[1], row2)
			top := row2 / 2
			m.gpu.SetSize(ws[2], top)
			m.cuda.SetSize(ws[2], row2-top)
		}
	}
	if m.opts.Steps != nil {
		sw := w * 3 / 5 // the investigation is the story; findings are its detail
		m.steps.SetSize(sw, findH)
		m.findings.SetSize(w-sw, findH)
	} else {
		m.findings.SetSize(w, findH)
	}
	if m.findings.Drilled() {
		m.findings.SetSize(w, body+len(m.strip))
	}
	m.table.SetSize(w, body+len(m.strip))
}

// View draws the dashboard.
func (m *Model) View() string {
	if m.w < MinWidth || m.h < MinHeight {
		return fmt.Sprintf("kvcanary: the terminal is %d×%d; the dashboard needs at least %d×%d.\nEnlarge the window (q quits).",
			m.w, m.h, MinWidth, MinHeight)
	}
	var b strings.Builder
	b.WriteString(m.header.View())
	b.WriteByte('\n')
	switch {
	case m.showHelp:
		b.WriteString(m.helpView())
	case m.findings.Drilled():
		b.WriteString(m.findings.View())
	case m.table.Opened():
		b.WriteString(m.table.View())
	default:
		var fed []string
		if m.gpuFed {
			fed = append(fed, m.gpu.View())
		}
		if m.cudaFed {
			fed = append(fed, m.cuda.View())
		}
		var row1, row2 string
		if m.w >= 112 {
			row1 = lipgloss.JoinHorizontal(lipgloss.Top, m.sessions.View(), m.checksum.View(), m.canary.View(), m.graphdiff.View())
			row2 = lipgloss.JoinHorizontal(lipgloss.Top, append([]string{m.sched.View()}, fed...)...)
		} else {
			cells := []string{m.graphdiff.View(), m.sched.View()}
			if len(fed) > 0 {
				cells = append(cells, lipgloss.JoinVertical(lipgloss.Left, fed...))
			}
			row1 = lipgloss.JoinHorizontal(lipgloss.Top, m.sessions.View(), m.checksum.View(), m.canary.View())
			row2 = lipgloss.JoinHorizontal(lipgloss.Top, cells...)
		}
		bottom := m.findings.View()
		if m.opts.Steps != nil {
			bottom = lipgloss.JoinHorizontal(lipgloss.Top, m.steps.View(), bottom)
		}
		b.WriteString(row1)
		b.WriteByte('\n')
		b.WriteString(row2)
		b.WriteByte('\n')
		for _, l := range m.strip {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		b.WriteString(bottom)
	}
	b.WriteByte('\n')
	b.WriteString(m.footer())
	return b.String()
}

func (m *Model) footer() string {
	if m.filtering {
		return fit(m.st.Title.Render("/")+m.filterBuf+"█"+m.st.Muted.Render("  (enter keeps, esc clears, ctrl+u empties)"), m.w)
	}
	if m.showStatus && m.status != "" {
		// A snapshot's path in full: the status has the line to itself
		// until the next key.
		tail := m.st.Muted.Render("  ? help")
		if ansi.StringWidth(m.status)+ansi.StringWidth(tail) > m.w {
			tail = ""
		}
		return fit(m.st.Status.Render(m.status)+tail, m.w)
	}
	var left string
	switch {
	case m.showHelp:
		left = m.st.Muted.Render("any key closes the help · q quit")
	case m.findings.Drilled():
		left = m.st.Muted.Render("esc back · ↑/↓ scroll · q quit")
	case m.table.Opened():
		left = m.st.Muted.Render("esc back · ↑/↓ move · o sort · r reverse · q quit")
	}
	focus := "  " + m.st.Muted.Render("focus: "+m.Focused())
	if left != "" {
		return fit(left+focus, m.w)
	}
	// Every key of the short help, whole: the long texts with the focused
	// panel's name when they fit, else the short texts (the double border
	// shows the focus), else what bubbles' help keeps.
	m.help.Width = 0
	for _, try := range []string{m.help.ShortHelpView(m.keys.ShortHelp()) + focus, m.help.ShortHelpView(m.keys.compactHelp()) + focus,
		m.help.ShortHelpView(m.keys.compactHelp())} {
		if ansi.StringWidth(try) <= m.w {
			return fit(try, m.w)
		}
	}
	m.help.Width = m.w
	return fit(m.help.ShortHelpView(m.keys.compactHelp()), m.w)
}

// helpView is the `?` overlay: every key, what the keys do on each panel,
// and the whole run header (a narrow header leaves items out).
func (m *Model) helpView() string {
	body := m.h - headerLines - footerLines
	iw := m.w - 2
	m.help.ShowAll, m.help.Width = true, iw
	hv := m.help.View(m.keys)
	m.help.ShowAll, m.help.Width = false, 0
	notes := []string{"enter: on the checksum, canary or graphdiff panel, its findings until you leave; " +
		"on sessions, the sessions table (o next column, r reverse).",
		"/ filter: enter keeps it, esc clears it, ctrl+u empties it.",
		"p freezes the view, not the counting; s writes the recent events to a bundle in " +
			"~/.local/state/kvcanary/snapshots (or $XDG_STATE_HOME/kvcanary/snapshots).",
		`sparklines: 1 cell = 1s of event time, newest right; "top N" fills a cell.`}
	lines := strings.Split(hv, "\n")
	lines = append(lines, "")
	for _, n := range notes {
		for _, l := range wrap(n, iw) {
			lines = append(lines, m.st.Muted.Render(l))
		}
	}
	if left := m.header.LeftOut(); len(left) > 0 {
		lines = append(lines, "")
		lines = append(lines, flow(append([]string{m.st.Label.Render("not in the header:")}, left...), iw)...)
	}
	return m.st.frame("help", lines, m.w, body, true)
}
