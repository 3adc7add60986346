package perfetto_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
	"github.com/kvcanary/kvcanary/traces/perfetto"
)

// traceEvent is one record as the Trace Event Format defines it.
type traceEvent struct {
	Name string          `json:"name"`
	Cat  string          `json:"cat"`
	Ph   string          `json:"ph"`
	TS   *float64        `json:"ts"`
	Dur  *float64        `json:"dur"`
	PID  *int            `json:"pid"`
	TID  *int            `json:"tid"`
	ID   json.RawMessage `json:"id"`
	S    string          `json:"s"`
	BP   string          `json:"bp"`
	Args map[string]any  `json:"args"`
}

type traceFile struct {
	DisplayTimeUnit string          `json:"displayTimeUnit"`
	TraceEvents     []traceEvent    `json:"traceEvents"`
	OtherData       json.RawMessage `json:"otherData"`
}

// twin is a recorded twin run plus what a CUDA probe would add.
type twin struct {
	bundle   []byte
	kinds    map[hook.Kind]int
	findings map[string]int // finding instants expected, by timeline name
}

// Synthetic probe cuda calls appended to the twin's events: two streams, one
// capture window, graph replays, event records waited on by the other stream.
const (
	streamMain   = 0xA0
	streamSide   = 0xB0
	cudaReplays  = 5
	cudaFlows    = 5
	cudaCaptures = 1
)

var (
	twinOnce sync.Once
	twinData *twin
)

func twinRun(t *testing.T) *twin {
	t.Helper()
	twinOnce.Do(func() { twinData = makeTwin(t) })
	if twinData == nil {
		t.Fatal("twin run failed")
	}
	return twinData
}

func makeTwin(t *testing.T) *twin {
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Manifest{Run: "perfetto-test", Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	tw := &twin{kinds: map[hook.Kind]int{}, findings: map[string]int{}}
	n := 0
	write := func(ev hook.Event) {
		if err := w.Write(ev); err != nil {
			t.Errorf("write: %v", err)
		}
		tw.kinds[ev.Kind]++
		if n++; n%500 == 0 {
			w.Flush() // many frames, so a cut bundle keeps some
		}
	}
	var lastTS int64
	pub := hook.WithAnalyzers(hook.PublishFunc(func(ev hook.Event) {
		lastTS = max(lastTS, ev.TS)
		write(ev)
	}), analyzers.All(analyzers.Options{WarmupMaxSeqLen: sim.WarmupSeqLen})...)
	cfg := sim.DefaultConfig()
	cfg.Seed = 1
	wl := sim.DefaultWorkload()
	wl.Sessions, wl.Rounds = 24, 2
	if raceEnabled {
		// Under -race the twin's index-K arithmetic was nearly all of
		// this package's time; the writer's lock is taken for every event
		// of any run. A smaller run still has findings, rooms and frames
		// enough to cut (the tests fail without them).
		wl.Sessions = 10
	}
	wl.Judge = outcome.Classifier{}.Outcome
	if _, err := sim.Run(context.Background(), cfg, wl, pub); err != nil {
		t.Fatalf("twin: %v", err)
	}
	// probe cuda: the engine process seen by the probe on another host.
	src := hook.Source{Node: "gpu-host", Proc: "cudaprobe", PID: 4242}
	ts := lastTS + 1000
	call := func(name string, stream, exec, arg uint64) {
		c := &hook.CUDA{Call: name, PID: 4242, TID: 7, Stream: hook.Hex64(stream), GraphExec: hook.Hex64(exec), Arg: hook.Hex64(arg), StartNS: ts, EndNS: ts + 2000}
		write(hook.Event{Kind: hook.KindCUDA, TS: ts, Src: src, Body: c})
		ts += 5000
	}
	call("cuStreamBeginCapture_v2", streamMain, 0, 0)
	call("cuLaunchKernel", streamMain, 0, 0xF1)
	call("cuLaunchKernel", streamMain, 0, 0xF2)
	call("cuStreamEndCapture", streamMain, 0, 0x6010)
	call("cuGraphInstantiateWithFlags", 0, 0x6110, 0x6010)
	for i := range cudaReplays {
		call("cuGraphLaunch", streamMain, 0x6110, 0)
		call("cuEventRecord", streamMain, 0, 0xE1+uint64(i))
		call("cuStreamWaitEvent", streamSide, 0, 0xE1+uint64(i))
		call("cuLaunchKernel_ptsz", streamSide, 0, 0xF3)
	}
	call("cuStreamWaitEvent", streamSide, 0, 0xEE) // no record seen: no arrow
	call("cuMemAlloc_v2", 0, 0, 0)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	tw.bundle = buf.Bytes()
	// The expected finding instants, by reading the bundle's findings back.
	r, err := traces.NewReader(bytes.NewReader(tw.bundle))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for ev, err := range r.All() {
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := ev.Body.(*hook.Finding); ok {
			switch f.Analyzer {
			case "graphdiff":
				tw.findings["graph≠eager"]++
			case "checksum":
				tw.findings["room mismatch"]++
			default:
				tw.findings[f.Evidence["class"]]++
			}
		}
	}
	return tw
}

func export(t *testing.T, bundle []byte) (traceFile, perfetto.Stats, *traces.Reader) {
	t.Helper()
	r, err := traces.NewReader(bytes.NewReader(bundle))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	var out bytes.Buffer
	w := perfetto.NewWriter(&out)
	if err := perfetto.Export(r, w); err != nil {
		t.Fatalf("export: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return decodeTrace(t, &out), w.Stats(), r
}

// decodeTrace decodes an export strictly (no field the format does not
// define) and checks its format.
func decodeTrace(t *testing.T, out *bytes.Buffer) traceFile {
	t.Helper()
	var tf traceFile
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tf); err != nil {
		t.Fatalf("the export is not trace-event JSON: %v\n%.2000s", err, out.String())
	}
	checkFormat(t, tf)
	return tf
}

type track struct{ pid, tid int }

// checkFormat checks every record against the Trace Event Format's rules
// for its phase, and the structure across records: metadata names every
// process and thread used, capture windows nest, each flow joins a start
// and a finish bound to enclosing slices.
func checkFormat(t *testing.T, tf traceFile) {
	t.Helper()
	if tf.DisplayTimeUnit != "ns" || len(tf.TraceEvents) == 0 {
		t.Fatalf("displayTimeUnit %q, %d events", tf.DisplayTimeUnit, len(tf.TraceEvents))
	}
	procNamed := map[int]bool{}
	threadNamed := map[track]bool{}
	slices := map[track][][2]float64{}
	type flowEnd struct {
		tr track
		ts float64
	}
	flowS, flowF := map[string]flowEnd{}, map[string]flowEnd{}
	async := map[string]int{}
	depth := map[track][]float64{}
	var be []traceEvent
	for i, e := range tf.TraceEvents {
		if e.PID == nil {
			t.Fatalf("event %d %+v: no pid", i, e)
		}
		tr := track{*e.PID, -1}
		if e.TID != nil {
			tr.tid = *e.TID
		}
		if e.Ph != "M" && e.TS == nil {
			t.Fatalf("event %d %+v: no ts", i, e)
		}
		switch e.Ph {
		case "M":
			name, _ := e.Args["name"].(string)
			switch e.Name {
			case "process_name":
				procNamed[*e.PID] = name != ""
			case "thread_name":
				threadNamed[tr] = name != ""
			case "thread_sort_index":
				if _, ok := e.Args["sort_index"].(float64); !ok {
					t.Errorf("event %d: thread_sort_index without a numeric sort_index", i)
				}
			default:
				t.Errorf("event %d: unknown metadata %q", i, e.Name)
			}
		case "X":
			if e.Dur == nil || *e.Dur < 0 || e.Name == "" {
				t.Errorf("event %d %+v: complete event without a name or a duration ≥ 0", i, e)
				continue
			}
			slices[tr] = append(slices[tr], [2]float64{*e.TS, *e.TS + *e.Dur})
		case "i":
			if e.S != "t" && e.S != "p" && e.S != "g" {
				t.Errorf("event %d: instant scope %q", i, e.S)
			}
		case "C":
			if len(e.Args) == 0 {
				t.Errorf("event %d: counter without series", i)
			}
			for k, v := range e.Args {
				if _, ok := v.(float64); !ok {
					t.Errorf("event %d: counter %s series %s is not a number: %v", i, e.Name, k, v)
				}
			}
		case "b", "e":
			if e.Cat == "" || len(e.ID) == 0 {
				t.Errorf("event %d: async event without cat or id", i)
			}
			key := e.Cat + "/" + string(e.ID)
			if e.Ph == "b" {
				async[key]++
			} else {
				async[key]--
			}
		case "s", "f":
			if len(e.ID) == 0 {
				t.Errorf("event %d: flow without id", i)
			}
			if e.Ph == "f" {
				if e.BP != "e" {
					t.Errorf("event %d: flow finish without bp \"e\"", i)
				}
				flowF[string(e.ID)] = flowEnd{tr, *e.TS}
			} else {
				flowS[string(e.ID)] = flowEnd{tr, *e.TS}
			}
		case "B", "E":
			be = append(be, e)
		default:
			t.Errorf("event %d: phase %q", i, e.Ph)
		}
		if e.Ph != "M" && e.Ph != "C" && e.Ph != "b" && e.Ph != "e" {
			if !procNamed[*e.PID] || !threadNamed[tr] {
				t.Errorf("event %d (%s %q) on pid %d tid %d before its process_name and thread_name", i, e.Ph, e.Name, tr.pid, tr.tid)
			}
		}
	}
	sort.SliceStable(be, func(i, j int) bool { return *be[i].TS < *be[j].TS })
	spans := map[track][][2]float64{} // X slices and B/E pairs, for the nesting check
	for tr, s := range slices {
		spans[tr] = append(spans[tr], s...)
	}
	for _, e := range be {
		tr := track{*e.PID, *e.TID}
		if e.Ph == "B" {
			depth[tr] = append(depth[tr], *e.TS)
		} else if len(depth[tr]) == 0 {
			t.Errorf("E at %v on %v without a B", *e.TS, tr)
		} else {
			spans[tr] = append(spans[tr], [2]float64{depth[tr][len(depth[tr])-1], *e.TS})
			depth[tr] = depth[tr][:len(depth[tr])-1]
		}
	}
	// Slices on one track must nest (Perfetto drops or misdraws the ones
	// that only partly overlap).
	for tr, ss := range spans {
		sort.Slice(ss, func(i, j int) bool {
			if ss[i][0] != ss[j][0] {
				return ss[i][0] < ss[j][0]
			}
			return ss[i][1] > ss[j][1]
		})
		var open [][2]float64
		for _, s := range ss {
			for len(open) > 0 && open[len(open)-1][1] <= s[0] {
				open = open[:len(open)-1]
			}
			if len(open) > 0 && s[1] > open[len(open)-1][1] {
				t.Errorf("track %v: slice %v overlaps %v without nesting", tr, s, open[len(open)-1])
			}
			open = append(open, s)
		}
	}
	for tr, d := range depth {
		if len(d) > 0 {
			t.Errorf("%d capture windows left open on %v", len(d), tr)
		}
	}
	for k, n := range async {
		if n != 0 {
			t.Errorf("async %s: %d begins without an end", k, n)
		}
	}
	enclosed := func(f flowEnd) bool {
		for _, s := range slices[f.tr] {
			if s[0] <= f.ts && f.ts <= s[1] {
				return true
			}
		}
		return false
	}
	for id, s := range flowS {
		f, ok := flowF[id]
		if !ok {
			t.Errorf("flow %s starts and never finishes", id)
			continue
		}
		if f.ts < s.ts || !enclosed(s) || !enclosed(f) {
			t.Errorf("flow %s: start %+v finish %+v not ordered or not bound to a slice", id, s, f)
		}
	}
	for id := range flowF {
		if _, ok := flowS[id]; !ok {
			t.Errorf("flow %s finishes without a start", id)
		}
	}
}

func count(tf traceFile, keep func(traceEvent) bool) int {
	n := 0
	for _, e := range tf.TraceEvents {
		if keep(e) {
			n++
		}
	}
	return n
}

func TestExportTwin(t *testing.T) {
	tw := twinRun(t)
	tf, st, _ := export(t, tw.bundle)
	t.Logf("bundle %d bytes, kinds %v, findings %v; stats %+v", len(tw.bundle), tw.kinds, tw.findings, st)

	steps := count(tf, func(e traceEvent) bool { return e.Ph == "X" && e.Cat == "step" })
	if steps != tw.kinds[hook.KindReplay] || steps == 0 || st.Steps != uint64(steps) {
		t.Errorf("step slices %d (stats %d), want one per replay event: %d", steps, st.Steps, tw.kinds[hook.KindReplay])
	}
	for _, e := range tf.TraceEvents {
		if e.Ph == "X" && e.Cat == "step" {
			if _, ok := e.Args["bs"].(float64); !ok || (e.Args["mode"] != "graph" && e.Args["mode"] != "eager") {
				t.Fatalf("step slice without batch size or mode: %+v", e)
			}
		}
	}
	streams := count(tf, func(e traceEvent) bool {
		name, _ := e.Args["name"].(string)
		return e.Ph == "M" && e.Name == "thread_name" && strings.HasPrefix(name, "CUDA stream") && strings.HasSuffix(name, " · thread 7")
	})
	if streams != 2 || st.Streams != 2 || st.CUDATracks != 4 {
		t.Errorf("stream tracks %d (stats %d streams, %d tracks), want 2 streams, 4 tracks (2 streams × 1 thread, 1 capture, 1 driver)", streams, st.Streams, st.CUDATracks)
	}
	graph := count(tf, func(e traceEvent) bool { return e.Ph == "X" && strings.HasPrefix(e.Name, "graph replay") })
	if graph != cudaReplays {
		t.Errorf("graph replay slices %d, want %d", graph, cudaReplays)
	}
	if n := count(tf, func(e traceEvent) bool { return e.Ph == "B" && e.Name == "graph capture" }); n != cudaCaptures {
		t.Errorf("capture windows %d, want %d", n, cudaCaptures)
	}
	if n := count(tf, func(e traceEvent) bool { return e.Ph == "s" }); n != cudaFlows || st.Flows != cudaFlows || st.UnmatchedWait != 1 {
		t.Errorf("flow arrows %d (stats %d, unmatched waits %d), want %d and 1", n, st.Flows, st.UnmatchedWait, cudaFlows)
	}
	if n := count(tf, func(e traceEvent) bool { return e.Ph == "X" && e.Cat == "cuda" }); n != tw.kinds[hook.KindCUDA] {
		t.Errorf("CUDA call slices %d, want %d", n, tw.kinds[hook.KindCUDA])
	}

	total := 0
	for name, want := range tw.findings {
		total += want
		got := count(tf, func(e traceEvent) bool { return e.Ph == "i" && e.Cat == "finding" && e.Name == name })
		if got != want {
			t.Errorf("finding instants %q: %d, want %d", name, got, want)
		}
	}
	if total == 0 || total != tw.kinds[hook.KindFinding] {
		t.Errorf("the twin run made %d findings (%d in the bundle); the test needs some", total, tw.kinds[hook.KindFinding])
	}
	for _, e := range tf.TraceEvents {
		if e.Cat == "finding" && e.Name == "graph≠eager" {
			if e.Args["topk_jaccard"] == nil || e.Args["step"] == nil || e.Args["summary"] == nil {
				t.Errorf("graph≠eager instant without its evidence: %v", e.Args)
			}
			break
		}
	}
	if n := count(tf, func(e traceEvent) bool { return e.Ph == "i" && e.Cat == "session" }); n != tw.kinds[hook.KindSession] {
		t.Errorf("session instants %d, want %d", n, tw.kinds[hook.KindSession])
	}
	rooms := tw.kinds[hook.KindRoomChecksum] / 2
	if n := count(tf, func(e traceEvent) bool { return e.Ph == "b" && e.Cat == "pd" }); n != rooms || rooms == 0 {
		t.Errorf("PD transfer slices %d, want one per room: %d", n, rooms)
	}
	for _, name := range []string{"running requests", "queued requests", "KV token usage (%)"} {
		if count(tf, func(e traceEvent) bool { return e.Ph == "C" && e.Name == name }) == 0 {
			t.Errorf("no %q counter samples", name)
		}
	}
	procs := map[string]bool{}
	for _, e := range tf.TraceEvents {
		if e.Ph == "M" && e.Name == "process_name" {
			procs[e.Args["name"].(string)] = true
		}
	}
	if !procs["sim"] || !procs["cudaprobe pid 4242 @ gpu-host"] || len(procs) != 2 {
		t.Errorf("processes %v, want the twin and the probed process", procs)
	}
}

// A bundle cut in the middle exports the events of its complete frames, and
// the JSON is complete.
func TestExportCutBundle(t *testing.T) {
	tw := twinRun(t)
	cut := tw.bundle[:len(tw.bundle)/2]
	// What the cut bundle still holds, read the ordinary way.
	r, err := traces.NewReader(bytes.NewReader(cut))
	if err != nil {
		t.Fatal(err)
	}
	replays := 0
	for {
		_, kind, _, err := r.NextLine()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if kind == hook.KindReplay {
			replays++
		}
	}
	if !r.Truncated() {
		t.Fatal("the cut bundle does not read as truncated")
	}
	r.Close()
	tf, st, er := export(t, cut)
	steps := count(tf, func(e traceEvent) bool { return e.Ph == "X" && e.Cat == "step" })
	if steps != replays || steps == 0 || steps >= tw.kinds[hook.KindReplay] {
		t.Errorf("cut bundle: %d step slices, want the %d replays of its complete frames (of %d)", steps, replays, tw.kinds[hook.KindReplay])
	}
	if !er.Truncated() || st.Events == 0 {
		t.Errorf("export reader: truncated %v, %d events", er.Truncated(), st.Events)
	}
}

// Quoted text in args stays data: JSON-escaped, and no raw '<' reaches the
// file (it may be pasted into HTML).
func TestExportEscapes(t *testing.T) {
	var out bytes.Buffer
	w := perfetto.NewWriter(&out)
	leak := "<script>alert(1)</script>\x1b[31mred\x1b[0m \"q\" \xff"
	w.Publish(hook.Event{Kind: hook.KindSession, TS: 5e9, Src: hook.Source{Proc: "sim"}, Body: &hook.Session{ID: "s1", Outcome: "leak", Excerpt: leak}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(out.Bytes(), "<>\x1b") {
		t.Fatalf("raw markup or escape bytes in the export: %q", out.String())
	}
	var tf traceFile
	if err := json.Unmarshal(out.Bytes(), &tf); err != nil {
		t.Fatal(err)
	}
	got := tf.TraceEvents[len(tf.TraceEvents)-1].Args["excerpt"]
	if want := strings.ToValidUTF8(leak, "\ufffd"); got != want {
		t.Errorf("excerpt round trip: %q, want %q", got, want)
	}
}

func TestExportEmpty(t *testing.T) {
	var out bytes.Buffer
	w := perfetto.NewWriter(&out)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var tf traceFile
	if err := json.Unmarshal(out.Bytes(), &tf); err != nil || len(tf.TraceEvents) != 0 {
		t.Fatalf("empty export %q: %v", out.String(), err)
	}
}

// publishAll writes evs through a Writer and returns the checked trace.
func publishAll(t *testing.T, evs []hook.Event) (traceFile, perfetto.Stats) {
	t.Helper()
	var out bytes.Buffer
	w := perfetto.NewWriter(&out)
	for _, ev := range evs {
		w.Publish(ev)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return decodeTrace(t, &out), w.Stats()
}

// engine and t0 are the process and the start time of the hand-made CUDA
// call lists below.
var engine = hook.Source{Node: "h", Proc: "engine", PID: 9}

const t0 = int64(20e9)

func cudaEv(src hook.Source, call string, tid uint32, stream uint64, start, end int64) hook.Event {
	return hook.Event{Kind: hook.KindCUDA, TS: end, Src: src, Body: &hook.CUDA{Call: call, PID: uint32(src.PID), TID: tid, Stream: hook.Hex64(stream), StartNS: start, EndNS: end}}
}

// A capture that begins and never ends (the probe stopped, the engine died)
// is closed at Close, at the last time seen, and marked as cut.
func TestExportCaptureNeverEnds(t *testing.T) {
	tf, _ := publishAll(t, []hook.Event{
		cudaEv(engine, "cuStreamBeginCapture_v2", 1, 0xA0, t0, t0+1000),
		cudaEv(engine, "cuLaunchKernel", 1, 0xA0, t0+5000, t0+6000),
		cudaEv(engine, "cuLaunchKernel", 1, 0xA0, t0+9000, t0+12000),
	})
	var ends []traceEvent
	for _, e := range tf.TraceEvents {
		if e.Ph == "E" {
			ends = append(ends, e)
		}
	}
	if len(ends) != 1 {
		t.Fatalf("%d capture ends, want 1 written at Close", len(ends))
	}
	if ends[0].Args["cut"] != "true" {
		t.Errorf("the capture closed at Close is not marked as cut: %v", ends[0].Args)
	}
	var lastEnd float64
	for _, e := range tf.TraceEvents {
		if e.Ph == "X" {
			lastEnd = max(lastEnd, *e.TS+*e.Dur)
		}
	}
	if got, want := *ends[0].TS, lastEnd; got != want || want == 0 {
		t.Errorf("cut capture ends at %v µs, want the last time seen %v", got, want)
	}
}

// Calls from two host threads on one stream overlap in time; each thread
// gets its own track so the slices of a track nest.
func TestExportTwoThreadsOneStream(t *testing.T) {
	tf, st := publishAll(t, []hook.Event{
		cudaEv(engine, "cuLaunchKernel", 1, 0xA0, t0, t0+10000),
		cudaEv(engine, "cuLaunchKernel", 2, 0xA0, t0+5000, t0+15000),
		cudaEv(engine, "cuMemAlloc_v2", 1, 0, t0+20000, t0+30000),
		cudaEv(engine, "cuMemFree_v2", 2, 0, t0+25000, t0+35000),
		cudaEv(engine, "cuStreamBeginCapture_v2", 1, 0xB0, t0+40000, t0+41000),
		cudaEv(engine, "cuLaunchKernel", 2, 0xB0, t0+40500, t0+42000),
		cudaEv(engine, "cuStreamEndCapture", 2, 0xB0, t0+43000, t0+44000),
	})
	if n := count(tf, func(e traceEvent) bool { return e.Ph == "X" && e.Cat == "cuda" }); n != 7 {
		t.Errorf("%d CUDA call slices, want 7", n)
	}
	if n := count(tf, func(e traceEvent) bool { return e.Ph == "E" && e.Args["cut"] == nil }); n != 1 {
		t.Errorf("%d capture windows closed by their end call, want 1", n)
	}
	if st.Streams != 2 {
		t.Errorf("stats: %d streams, want 2", st.Streams)
	}
}

// Engines of a PD deployment: one process per host, role and rank, whatever
// the process ids.
func TestProcessPerRoleAndRank(t *testing.T) {
	ev := func(src hook.Source) hook.Event {
		return hook.Event{Kind: hook.KindSched, TS: 20e9, Src: src, Body: &hook.Sched{RunningReq: 1}}
	}
	tf, st := publishAll(t, []hook.Event{
		ev(hook.Source{Node: "a", Proc: "sglang", PID: 10, Role: "decode", Rank: 0}),
		ev(hook.Source{Node: "a", Proc: "sglang", PID: 11, Role: "decode", Rank: 1}),
		ev(hook.Source{Node: "a", Proc: "sglang", PID: 12, Role: "prefill", Rank: 0}),
		ev(hook.Source{Node: "b", Proc: "sglang", PID: 10, Role: "decode", Rank: 0}),
		ev(hook.Source{Node: "a", Proc: "sglang", PID: 13, Role: "decode", Rank: 1}), // restarted rank 1
		ev(hook.Source{Node: "a", Proc: "kvcanary", PID: 99}),
	})
	var names []string
	for _, e := range tf.TraceEvents {
		if e.Ph == "M" && e.Name == "process_name" {
			names = append(names, e.Args["name"].(string))
		}
	}
	want := []string{"decode rank 0 @ a", "decode rank 1 @ a", "prefill rank 0 @ a", "decode rank 0 @ b", "kvcanary pid 99 @ a"}
	if strings.Join(names, "|") != strings.Join(want, "|") || st.Processes != len(want) {
		t.Errorf("processes %q (stats %d), want %q", names, st.Processes, want)
	}
}

// Past the track cap, calls share one overflow track; those that would
// overlap there become instants, so its slices still nest.
func TestExportOverflowTrackNests(t *testing.T) {
	var evs []hook.Event
	for i := range perfetto.MaxStreams + 10 {
		evs = append(evs, cudaEv(engine, "cuLaunchKernel", uint32(i+1), 0xA0, t0+int64(i)*100, t0+int64(i)*100+1000))
	}
	tf, st := publishAll(t, evs)
	if st.CUDATracks != perfetto.MaxStreams || st.Unnested == 0 {
		t.Errorf("%d tracks, %d calls as instants; want %d tracks and some instants", st.CUDATracks, st.Unnested, perfetto.MaxStreams)
	}
	if n := count(tf, func(e traceEvent) bool { return e.Cat == "cuda" && (e.Ph == "X" || e.Ph == "i") }); n != len(evs) {
		t.Errorf("%d calls written, want %d", n, len(evs))
	}
}
