package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/report"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// leakText is a corrupted session's reply carrying markup and terminal
// escapes: the report must show it as data.
const leakText = "<script>alert('x')</script>\x1b[31mred\x1b[0m <tool_call>{\"name\":\"x\"}"

// fixtureSessions is the twin runs' size: 24 sessions × 2 rounds, the size
// the Markdown golden was written from; 8 under -race. The report has no
// goroutines of its own: under -race the two twin runs were nearly all of
// the package's time, and the rendering checked against the golden is
// arithmetic the plain pass checks (TestMarkdownGolden compares it only
// without -race).
func fixtureSessions() int {
	if raceEnabled {
		return 8
	}
	return 24
}

// twinBundle records a small twin run; overlap=false is the A/B arm (sched
// and sessions only, as the demo records its arms).
func twinBundle(t *testing.T, overlap bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	cfg := sim.DefaultConfig()
	cfg.Seed = 1
	cfg.MultiStreamOverlap = overlap
	rc := cfg.RunConfig()
	rc.Sessions, rc.Rounds = fixtureSessions(), 2
	w, err := traces.NewWriter(&buf, traces.Manifest{Tool: "kvcanary test", Config: rc, Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var as []hook.Analyzer
	if overlap {
		as = analyzers.All(analyzers.Options{WarmupMaxSeqLen: sim.WarmupSeqLen})
	} else {
		cfg.Instruments = sim.Instruments{Sched: true}
	}
	var last int64
	pub := hook.WithAnalyzers(hook.PublishFunc(func(ev hook.Event) {
		last = max(last, ev.TS)
		if err := w.Write(ev); err != nil {
			t.Error(err)
		}
	}), as...)
	wl := sim.DefaultWorkload()
	wl.Sessions, wl.Rounds, wl.Judge = fixtureSessions(), 2, outcome.Classifier{}.Outcome
	if _, err := sim.Run(context.Background(), cfg, wl, pub); err != nil {
		t.Fatal(err)
	}
	if overlap {
		w.Write(hook.Event{Kind: hook.KindSession, TS: last, Src: hook.Source{Proc: "repro"},
			Body: &hook.Session{ID: "s-quoted", Outcome: hook.OutcomeLeak, Rounds: 1, Round: 1, Reason: "tool-call markup \x1b[1m<tool_call>", Excerpt: leakText}})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var (
	fixOnce sync.Once
	fixRep  *report.Report
)

func fixture(t *testing.T) *report.Report {
	t.Helper()
	fixOnce.Do(func() {
		var runs []*report.Run
		for _, c := range []struct {
			name    string
			overlap bool
		}{{"runs/baseline.kvtrace", true}, {"runs/no overlap.kvtrace", false}} {
			r, err := traces.NewReader(bytes.NewReader(twinBundle(t, c.overlap)))
			if err != nil {
				t.Fatal(err)
			}
			run, err := report.Read(c.name, r)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, run)
		}
		fixRep = report.Build(runs)
	})
	if fixRep == nil {
		t.Fatal("fixture failed")
	}
	return fixRep
}

// rendered is the fixture's report as write renders it
// ((*report.Report).WriteMarkdown or WriteHTML).
func rendered(t *testing.T, write func(*report.Report, io.Writer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := write(fixture(t), &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestMarkdownGolden(t *testing.T) {
	md := rendered(t, (*report.Report).WriteMarkdown)
	got := string(md)
	golden := filepath.Join("testdata", "report.md.golden")
	if raceEnabled {
		// The golden is the 24-session fixture's; under -race the
		// fixture is smaller (fixtureSessions). The escaping below is
		// checked all the same.
		t.Log("golden not compared under -race")
	} else {
		if *update {
			if err := os.WriteFile(golden, md, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./report -update to write it)", err)
		}
		if got != string(want) {
			t.Errorf("Markdown differs from %s (go test ./report -update rewrites it):\n%s", golden, got)
		}
	}
	// Quoted text is escaped: no raw markup, no terminal escape byte.
	for _, bad := range []string{"<script>", "\x1b", "<tool_call>"} {
		if strings.Contains(got, bad) {
			t.Errorf("Markdown holds raw %q", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;\\x1b[31mred", "\\x1b\\[1m&lt;tool\\_call&gt;"} {
		if !strings.Contains(got, want) {
			t.Errorf("Markdown lacks the escaped form %q", want)
		}
	}
}

func TestHTMLEscapesAndSelfContained(t *testing.T) {
	h := string(rendered(t, (*report.Report).WriteHTML))
	for _, bad := range []string{"<script", "\x1b", "<tool_call>", "src=", `href="http`, `href="//`, "@import", "url("} {
		if strings.Contains(h, bad) {
			i := strings.Index(h, bad)
			t.Errorf("HTML holds %q: …%s…", bad, h[max(0, i-80):min(len(h), i+80)])
		}
	}
	if !strings.Contains(h, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;\\x1b[31mred") {
		t.Error("the leaked text is not shown escaped")
	}
	if n := strings.Count(h, "<svg"); n != 5 {
		t.Errorf("%d inline SVG plots, want 5", n)
	}
	if len(h) > 2<<20 {
		t.Errorf("report is %d bytes, over 2 MB", len(h))
	}
}

func TestVerdictsNotMeasured(t *testing.T) {
	rep := fixture(t)
	arm := rep.Runs[1]
	for _, v := range arm.Verdicts() {
		if v.State != report.StateNotMeasured {
			t.Errorf("arm without instruments: %s is %q (%s), want not measured", v.Layer, v.State, v.Text)
		}
	}
	base := rep.Runs[0]
	states := map[string]string{}
	for _, v := range base.Verdicts() {
		states[v.Layer] = v.State
	}
	if states["transfer"] != report.StateClean || states["buffer"] != report.StateClean || states["compute"] != report.StateFault {
		t.Errorf("twin baseline verdicts %v, want transfer clean, buffer clean, compute fault", states)
	}
	if len(rep.AB) != 1 || rep.AB[0].Report.FlagUnderTest == nil || rep.AB[0].Report.FlagUnderTest.Name != "multi_stream_overlap" {
		t.Errorf("A/B: %+v", rep.AB)
	}
}

// chromium finds Debian's chromium, or skips (fails under
// KVCANARY_REQUIRE_PRIVILEGED=1, where CI installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("KVCANARY_REQUIRE_PRIVILEGED") == "1" {
		t.Fatal("chromium not found but KVCANARY_REQUIRE_PRIVILEGED=1: install it (apt-get install -y chromium)")
	}
	t.Skip("chromium not found: install Debian's chromium package to render the report")
	return ""
}

func runChromium(t *testing.T, bin string, args ...string) (stdout, stderr string) {
	t.Helper()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0"}
	ctx, cancel := context.WithTimeout(context.Background(), 120e9)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, e.String())
	}
	return o.String(), e.String()
}

// pageRequests reads a Chromium net log and returns the URLs of requests a
// page made: URL_REQUEST_START_JOB events whose initiator is an origin
// (Chromium's own traffic — component updates, sign-in, network time — is
// "not an origin").
func pageRequests(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("net log: %v", err)
	}
	defer f.Close()
	var log struct {
		Constants struct {
			LogEventTypes map[string]int `json:"logEventTypes"`
		} `json:"constants"`
		Events []struct {
			Type   int            `json:"type"`
			Params map[string]any `json:"params"`
		} `json:"events"`
	}
	// The log is one JSON object (Chromium may leave it unterminated when
	// killed); the decoder reads the first value only.
	if err := json.NewDecoder(f).Decode(&log); err != nil {
		t.Fatalf("net log %s: %v", path, err)
	}
	start, ok := log.Constants.LogEventTypes["URL_REQUEST_START_JOB"]
	if !ok {
		t.Fatal("net log has no URL_REQUEST_START_JOB event type")
	}
	var urls []string
	for _, e := range log.Events {
		if e.Type != start {
			continue
		}
		u, _ := e.Params["url"].(string)
		if init, _ := e.Params["initiator"].(string); u != "" && init != "not an origin" {
			urls = append(urls, u)
		}
	}
	return urls
}

// load opens page in headless Chromium and returns its DOM, the console
// messages and the page's network requests.
func load(t *testing.T, bin, page string) (dom string, console, requests []string) {
	t.Helper()
	netlog := filepath.Join(t.TempDir(), "net.json")
	dom, logs := runChromium(t, bin, "--log-net-log="+netlog, "--dump-dom", "file://"+page)
	// Chromium logs every console message (errors, CSP violations) as a
	// CONSOLE line.
	console = regexp.MustCompile(`(?m)^.*:CONSOLE.*$`).FindAllString(logs, -1)
	return dom, console, pageRequests(t, netlog)
}

// The HTML report renders in headless Chromium with no console message and
// no network request; the DOM holds the headline, the three verdicts and
// every plot; a PNG screenshot is taken. A control page shows the checks
// see a console error and a request when there is one.
func TestHTMLInChromium(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()

	control := filepath.Join(dir, "control.html")
	os.WriteFile(control, []byte(`<html><body><img src="http://127.0.0.1:9/x.png"><script>console.error("boom")</script></body></html>`), 0o644)
	_, cc, cr := load(t, bin, control)
	if len(cc) == 0 || len(cr) == 0 || !strings.Contains(strings.Join(cr, " "), "127.0.0.1:9") {
		t.Fatalf("control page: console %q, requests %q: the checks below would see nothing", cc, cr)
	}

	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, rendered(t, (*report.Report).WriteHTML), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, console, reqs := load(t, bin, page)
	if len(console) > 0 {
		t.Errorf("console messages while loading the report:\n%s", strings.Join(console, "\n"))
	}
	if len(reqs) > 0 {
		t.Errorf("the report made network requests: %q", reqs)
	}
	for _, id := range []string{"headline", "headline-run1", "verdict-transfer", "verdict-buffer", "verdict-compute",
		"plot-batch", "plot-time", "plot-jaccard", "plot-sched", "plot-ab"} {
		i := strings.Index(dom, `id="`+id+`"`)
		if i < 0 {
			t.Errorf("DOM lacks #%s", id)
			continue
		}
		if strings.HasPrefix(id, "plot-") {
			end := strings.Index(dom[i:], "</figure>")
			if end < 0 || !strings.Contains(dom[i:i+end], "<svg") {
				t.Errorf("#%s has no rendered SVG", id)
			}
		}
	}
	if !strings.Contains(dom, "sessions corrupted") {
		t.Error("DOM lacks the headline's corruption rate")
	}
	if strings.Contains(dom, "<script") {
		t.Error("the leaked <script> became markup in the DOM")
	}
	shot := filepath.Join(dir, "report.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1200,3000", "file://"+page)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10<<10 {
		t.Fatalf("screenshot: %v, %d bytes", err, len(png))
	}
}

// A long run's plots sample the whole run, not its first points, and the
// report says they show a sample.
func TestPlotsSampleTheWholeRun(t *testing.T) {
	const nSched, nSessions = 50000, 30000
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Manifest{Tool: "kvcanary test", Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	const t0, step = int64(1e18), int64(1e6)
	src := hook.Source{Proc: "sim"}
	for i := range nSched {
		ev := hook.Event{Kind: hook.KindSched, TS: t0 + int64(i)*step, Src: src, Body: &hook.Sched{RunningReq: 1 + i%7, TokenUsage: 0.5}}
		if i == nSched-1 {
			ev.Body.(*hook.Sched).RunningReq = 99 // the peak comes last
		}
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
		if i < nSessions {
			out := hook.OutcomeDone
			if i%100 == 0 {
				out = hook.OutcomeLeak
			}
			ts := t0 + int64(i)*step*nSched/nSessions
			if err := w.Write(hook.Event{Kind: hook.KindSession, TS: ts, Src: src, Body: &hook.Session{ID: "s" + strconv.Itoa(i), Outcome: out, Rounds: 1}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := closeAndRead(t, w, &buf, "long.kvtrace")
	end := float64((nSched-1)*step) / 1e9
	if n := len(run.Sched); n == 0 || n >= nSched || run.SchedSampled.Total != nSched || run.Sched[n-1].T < end*0.99 {
		t.Errorf("scheduler points: %d kept of %d, last at %.1fs, want a sample reaching the run's end %.1fs", n, run.SchedSampled.Total, run.Sched[max(n-1, 0)].T, end)
	}
	if n := len(run.SessionEnds); n == 0 || n >= nSessions || run.SessionEndsSampled.Total != nSessions || run.SessionEnds[n-1].T < end*0.99 {
		t.Errorf("session ends: %d kept of %d, last at %.1fs, want a sample reaching the run's end %.1fs", n, run.SessionEndsSampled.Total, run.SessionEnds[max(n-1, 0)].T, end)
	}
	rep := report.Build([]*report.Run{run})
	var md, h bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(&h); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("%d of %d scheduler observations", len(run.Sched), nSched),
		fmt.Sprintf("%d of %d session ends", len(run.SessionEnds), nSessions),
	} {
		if !strings.Contains(h.String(), want) {
			t.Errorf("the HTML does not say its plot shows a sample: no %q", want)
		}
	}
	if !strings.Contains(md.String(), "peak 99 running requests") {
		t.Errorf("the Markdown's peak is not the whole run's: %s", regexp.MustCompile(`\*\*scheduler pressure.*`).FindString(md.String()))
	}
}

// Bundles removed after the report was written (the demo's temporary
// directory): the re-check section says so instead of naming them.
func TestRecheckBundlesGone(t *testing.T) {
	base := fixture(t)
	rep := *base
	const gone = "The bundles were removed (a temporary directory); run kvcanary demo --keep to keep them."
	rep.BundlesGone = gone
	var h, md bytes.Buffer
	if err := rep.WriteHTML(&h); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"HTML": h.String(), "Markdown": md.String()} {
		i := strings.Index(out, "6. Re-check")
		if i < 0 {
			t.Fatalf("%s: no re-check section", name)
		}
		sec := out[i:]
		if !strings.Contains(sec, "The bundles were removed (a temporary directory)") || strings.Contains(sec, "kvcanary checksum compare") || strings.Contains(sec, "baseline.kvtrace") {
			t.Errorf("%s re-check section with the bundles gone:\n%s", name, sec)
		}
	}
	if len(rep.Commands()) != 0 || len(base.Commands()) == 0 {
		t.Errorf("commands: %d with the bundles gone, %d with them", len(rep.Commands()), len(base.Commands()))
	}
}

// readEvents judges a bundle holding evs (timestamps 1, 2, …).
func readEvents(t *testing.T, evs ...hook.Event) *report.Run {
	t.Helper()
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Manifest{Tool: "kvcanary test", Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		ev.TS = int64(i + 1)
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	return closeAndRead(t, w, &buf, "partial.kvtrace")
}

// closeAndRead closes w, which wrote into buf, and judges the bundle as
// report.Read does a file named name.
func closeAndRead(t *testing.T, w *traces.Writer, buf *bytes.Buffer, name string) *report.Run {
	t.Helper()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := traces.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	run, err := report.Read(name, r)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// Unknown is not clean: a room seen on one side only makes the transfer
// layer partial (not DIRTY), and a producer's run.end saying it lost
// canary evidence makes a buffer with no overwrite partial (not pristine),
// with the producer's note in the text; markdown marks neither ✅ nor ❌.
func TestVerdictsPartial(t *testing.T) {
	room := func(r uint64, side hook.Side) hook.Event {
		return hook.Event{Kind: hook.KindRoomChecksum, Body: &hook.RoomChecksum{Room: hook.Dec64(r), Side: side, SeqLen: 100, Pages: 2, Bsum: hook.Hex64(r * 7)}}
	}
	pages := hook.Event{Kind: hook.KindCanaryPages, Body: &hook.CanaryPages{Step: 1, Policy: "live", PagesTotal: 100, PagesChecked: 10, LivePages: 10, LiveChecked: 10,
		Expected: []uint32{3}, Running: []string{"r1"}, Changed: []hook.PageChange{{Page: 3, Owner: "r1", Before: 1, After: 2}}}}
	end := func(msg string) hook.Event {
		return hook.Event{Kind: hook.KindRunEnd, Src: hook.Source{Proc: "python3", PID: 9, Role: "decode", Rank: 1}, Body: &hook.RunEnd{Error: msg}}
	}
	states := func(run *report.Run) map[string]report.Verdict {
		m := map[string]report.Verdict{}
		for _, v := range run.Verdicts() {
			m[v.Layer] = v
		}
		return m
	}
	v := states(readEvents(t, room(1, hook.SidePrefill), room(1, hook.SideDecode), room(2, hook.SidePrefill), pages, end("")))
	if tr := v["transfer"]; tr.State != report.StatePartial || strings.Contains(tr.Text, "DIRTY") || !strings.Contains(tr.Text, "1 of 2 rooms seen on one side only") {
		t.Errorf("one-sided room: transfer %q: %s", tr.State, tr.Text)
	}
	if bu := v["buffer"]; bu.State != report.StateClean {
		t.Errorf("nothing lost: buffer %q: %s", bu.State, bu.Text)
	}
	v = states(readEvents(t, room(1, hook.SidePrefill), room(1, hook.SideDecode), pages, end("canary.replay off: 3 errors at X")))
	if bu := v["buffer"]; bu.State != report.StatePartial || strings.Contains(bu.Text, "pristine") || !strings.Contains(bu.Text, "python3 pid 9 (decode rank 1): canary.replay off") {
		t.Errorf("canary off: buffer %q: %s", bu.State, bu.Text)
	}
	if tr := v["transfer"]; tr.State != report.StateClean {
		t.Errorf("a canary note: transfer %q: %s", tr.State, tr.Text)
	}
	run := readEvents(t, room(1, hook.SidePrefill), room(1, hook.SideDecode), pages, end("2 room checksums skipped; canary.replay off"))
	var md bytes.Buffer
	if err := report.Build([]*report.Run{run}).WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if s := md.String(); strings.Contains(s, "✅") || strings.Contains(s, "❌") || !strings.Contains(s, "⚠️ transfer partial") || !strings.Contains(s, "⚠️ buffer partial") {
		t.Errorf("markdown verdicts:\n%s", s)
	}
}

// A bundle that lost a frame is reported on what was readable, but its
// headline and its A/B verdict say PARTIAL: the footer counts events nobody
// read, and the sessions in them (here the only leaks) are missing.
func TestHeadlinePartialWhenAFrameIsLost(t *testing.T) {
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Manifest{Tool: "kvcanary test", Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		out := hook.OutcomeMaxRounds
		if i >= 10 && i < 20 {
			out = hook.OutcomeLeak
		}
		b := &hook.Session{ID: fmt.Sprint(i), Outcome: out, Rounds: 2, Excerpt: strings.Repeat(fmt.Sprint(i), 200)}
		if err := w.Write(hook.Event{Kind: b.Kind(), TS: int64(i + 1), Body: b}); err != nil {
			t.Fatal(err)
		}
		if i == 9 || i == 19 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	read := func(b []byte) *report.Run {
		r, err := traces.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil
		}
		defer r.Close()
		run, err := report.Read("flip.kvtrace", r)
		if err != nil {
			return nil
		}
		return run
	}
	var flip *report.Run
	for at := len(good) / 2; at < len(good)-4 && flip == nil; at++ {
		bad := append([]byte(nil), good...)
		for i := range 4 {
			bad[at+i] ^= 0xff
		}
		if run := read(bad); run != nil && run.Skipped > 0 && !run.Truncated && run.Summary.Sessions == 20 {
			flip = run
		}
	}
	if flip == nil {
		t.Fatal("no four flipped bytes damaged the middle frame alone")
	}
	if h := flip.Headline(); !strings.Contains(h, "0 of 20 sessions corrupted") ||
		!strings.Contains(h, "; PARTIAL: the footer counts 30 events, 20 were readable: 10 events unreadable (1 damaged records skipped); sessions may be missing") {
		t.Errorf("headline %q", h)
	}
	base := read(good)
	if h := base.Headline(); strings.Contains(h, "PARTIAL") {
		t.Errorf("whole bundle: headline %q", h)
	}
	rep := report.Build([]*report.Run{base, flip})
	if v := rep.AB[0].Report.Verdict; !strings.Contains(v, "PARTIAL: run B lost events") {
		t.Errorf("A/B verdict %q", v)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "- **run 2**: 0 of 20 sessions corrupted") || !strings.Contains(md.String(), "PARTIAL: the footer counts 30 events") {
		t.Errorf("markdown headline:\n%s", md.String())
	}
}
