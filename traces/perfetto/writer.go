package perfetto

import (
	"bufio"
	"cmp"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Caps on the state a Writer keeps, so memory does not grow with the bundle.
const (
	MaxProcesses = 1024    // processes (sources); more share the last one
	MaxStreams   = 4096    // CUDA tracks (stream × host thread, capture windows, driver calls per thread); more share "other CUDA calls"
	MaxRooms     = 1 << 16 // rooms waiting for their second side
	MaxFlows     = 1 << 16 // CUDA events recorded and not yet waited on
)

// Thread ids of the fixed tracks inside each process.
const (
	tidSteps    = 1
	tidFindings = 2
	tidSessions = 3
	tidDriver   = 4  // sort index of the tracks of CUDA driver calls that are not stream-ordered
	tidStreams0 = 99 // "other CUDA calls" once MaxStreams is reached
	tidStream1  = 100
)

// Sort indices of the CUDA tracks: the tracks of the n-th stream of a process
// sort at tidStream1 + n*sortPerStream + j, its capture window track first
// (j = 0), then one per host thread in the order seen.
const sortPerStream = 1000

// TSMargin is subtracted from the first event's time to give the trace's
// time base, so events a little older than the first one (several sources,
// probes that publish a call when it returns) still get positive times.
const TSMargin = int64(10e9)

// Stats count what a Writer wrote and what its caps dropped.
type Stats struct {
	Events        uint64            `json:"events"`         // events published
	ByKind        map[string]uint64 `json:"by_kind"`        // events published, per kind
	Ignored       uint64            `json:"ignored"`        // events of kinds the timeline does not show
	Undecodable   uint64            `json:"undecodable"`    // event lines whose body did not decode (left out)
	TraceEvents   uint64            `json:"trace_events"`   // trace-event records written, metadata included
	Processes     int               `json:"processes"`      // process tracks
	Streams       int               `json:"streams"`        // CUDA streams (per process)
	CUDATracks    int               `json:"cuda_tracks"`    // CUDA tracks: stream × host thread, capture windows, driver calls per thread
	Steps         uint64            `json:"steps"`          // replay slices
	Findings      uint64            `json:"findings"`       // finding instants
	Sessions      uint64            `json:"sessions"`       // session instants
	CUDACalls     uint64            `json:"cuda_calls"`     // CUDA call slices
	Captures      uint64            `json:"captures"`       // capture windows opened
	CapturesCut   uint64            `json:"captures_cut"`   // capture windows never ended, closed at Close (args.cut)
	Unnested      uint64            `json:"unnested"`       // calls on the shared overflow track written as instants (they overlapped)
	Flows         uint64            `json:"flows"`          // record→wait flow arrows completed
	UnmatchedWait uint64            `json:"unmatched_wait"` // waits on an event no record was seen for
	Counters      uint64            `json:"counters"`       // counter samples
	Transfers     uint64            `json:"transfers"`      // PD transfer slices (rooms with both sides)
	RoomsUnpaired uint64            `json:"rooms_unpaired"` // rooms with one side only (instants at Close)
	Dropped       uint64            `json:"dropped"`        // state dropped by the caps (rooms, flows)
	Bytes         int64             `json:"bytes"`          // JSON bytes written
	BaseNS        int64             `json:"base_unix_ns"`   // Unix time of ts 0
}

type proc struct {
	pid     int
	threads map[int]bool // tids whose thread_name was written
}

type streamKey struct {
	pid    int
	stream uint64
}

// Kinds of CUDA track.
const (
	trackCalls   = iota // stream-ordered calls of one host thread on one stream
	trackCapture        // capture windows (B/E) of one stream
	trackDriver         // other driver calls of one host thread
)

// trackKey names a CUDA track. Slices on one track must nest, and calls of
// one host thread never overlap (a thread is in one driver call at a time,
// or in calls nested in it), so calls get a track per (stream, host thread)
// and capture windows, which may begin on one thread and end on another, a
// track of their own per stream.
type trackKey struct {
	pid    int
	stream uint64
	host   uint32
	kind   uint8
}

// capture is an open capture window: where its B was written.
type capture struct {
	tid int
	ts  int64
}

type room struct {
	ts   int64
	pid  int
	side hook.Side
	bsum hook.Hex64
	xxh3 hook.Hex64
	req  string
}

// Writer writes Chrome trace-event JSON as events arrive. It is a
// hook.Publisher and an io.Closer; Close finishes the JSON. Safe for
// concurrent use (events are serialized).
type Writer struct {
	mu       sync.Mutex
	w        *bufio.Writer
	cw       *countWriter
	err      error
	closed   bool
	first    bool // the next record is the first of traceEvents
	haveBase bool
	base     int64

	procs    map[string]*proc
	overflow *proc                   // the process of sources beyond MaxProcesses
	streams  map[streamKey]int       // stream → its ordinal in its process
	nStreams map[int]int             // streams per process
	tracks   map[trackKey]int        // CUDA track → tid
	nThreads map[streamKey]int       // host-thread tracks per stream (sort order)
	nextTID  map[int]int             // next free CUDA track tid per process
	capture  map[streamKey][]capture // open capture windows per stream
	other    map[int]int64           // end of the last slice on each process's overflow track
	last     int64                   // the latest time seen (cut captures end there)
	rooms    map[uint64]room
	flows    map[streamKey]uint64 // (pid, CUDA event handle) → flow id
	nextFlow uint64
	retract  map[int]int64 // cumulative retractions per process

	stats Stats
	buf   []byte
}

// NewWriter starts a trace on w. Nothing is written until the first event
// or Close.
func NewWriter(w io.Writer) *Writer {
	cw := &countWriter{w: w}
	return &Writer{
		w: bufio.NewWriterSize(cw, 256<<10), cw: cw, first: true,
		procs: map[string]*proc{}, streams: map[streamKey]int{}, nStreams: map[int]int{},
		tracks: map[trackKey]int{}, nThreads: map[streamKey]int{}, nextTID: map[int]int{},
		capture: map[streamKey][]capture{}, other: map[int]int64{},
		rooms: map[uint64]room{}, flows: map[streamKey]uint64{},
		retract: map[int]int64{},
		stats:   Stats{ByKind: map[string]uint64{}},
	}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Stats returns what has been written so far.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.ByKind = maps.Clone(w.stats.ByKind)
	s.Bytes = w.cw.n + int64(w.w.Buffered())
	return s
}

// processOf names the process an event belongs to: its key (events with
// equal keys share a process track) and its label. An engine (a source with
// a Role) gets a process per host, role and rank ("decode rank 1 @ node-a"),
// whatever its process name and id, so a restarted rank stays on its track;
// other sources get one per host, process name and id. Nothing else in this
// package reads Source.
func processOf(src hook.Source) (key, label string) {
	if src.Role != "" {
		rank := strconv.Itoa(int(src.Rank))
		label = src.Role + " rank " + rank
		if src.Node != "" {
			label += " @ " + src.Node
		}
		return "role\x00" + src.Node + "\x00" + src.Role + "\x00" + rank, label
	}
	name := src.Proc
	if name == "" {
		name = "events"
	}
	var pid string
	if src.PID != 0 {
		pid = strconv.Itoa(int(src.PID))
		name += " pid " + pid
	}
	if src.Node != "" {
		name += " @ " + src.Node
	}
	return "proc\x00" + src.Node + "\x00" + src.Proc + "\x00" + pid, name
}

// Publish writes one event's trace records. It never blocks on anything but
// the output.
func (w *Writer) Publish(ev hook.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.stats.Events++
	w.stats.ByKind[ev.Kind.String()]++
	if !w.haveBase && ev.TS != 0 {
		w.base, w.haveBase = ev.TS-TSMargin, true
		w.stats.BaseNS = w.base
	}
	w.last = max(w.last, ev.TS)
	p := w.process(ev.Src)
	switch b := ev.Body.(type) {
	case *hook.Replay:
		w.replay(p, ev.TS, b)
	case *hook.Finding:
		w.finding(p, ev.TS, b)
	case *hook.Session:
		w.session(p, ev.TS, b)
	case *hook.Sched:
		w.sched(p, ev.TS, b)
	case *hook.RoomChecksum:
		w.roomChecksum(p, ev.TS, b)
	case *hook.CUDA:
		w.cuda(p, ev.TS, b)
	case *hook.GPU:
		for _, d := range b.Devices {
			pre := "gpu" + strconv.Itoa(d.Index) + " "
			if d.MemTotal > 0 {
				w.counter(p, ev.TS, pre+"memory used (GiB)", "GiB", float64(d.MemUsed)/(1<<30))
			}
			w.counter(p, ev.TS, pre+"utilisation (%)", "util", float64(d.UtilGPU))
		}
	case *hook.RunStart:
		w.instant(p, tidFindings, ev.TS, "run start", "run", func() {
			w.arg("tool", b.Tool)
			w.arg("engine", b.Config.Engine)
			w.arg("model", b.Config.Model)
			w.arg("index_k_dtype", b.Config.IndexKDtype)
			w.argBool("cuda_graph", b.Config.CUDAGraph)
			w.argBool("multi_stream_overlap", b.Config.MultiStreamOverlap)
			w.arg("disaggregation", b.Config.Disaggregation)
		})
	case *hook.RunEnd:
		w.instant(p, tidFindings, ev.TS, "run end", "run", func() {
			w.argInt("wall_ns", b.WallNS)
			w.argInt("steps", b.Steps)
			w.argInt("dropped", int64(b.Dropped))
			w.arg("error", b.Error)
		})
	default:
		w.stats.Ignored++
	}
}

func (w *Writer) process(src hook.Source) *proc {
	key, label := processOf(src)
	if p, ok := w.procs[key]; ok {
		return p
	}
	if len(w.procs) >= MaxProcesses {
		if w.overflow != nil {
			return w.overflow
		}
		label = "other sources"
	}
	p := &proc{pid: len(w.procs) + 1, threads: map[int]bool{}}
	if len(w.procs) >= MaxProcesses {
		w.overflow = p
	} else {
		w.procs[key] = p
	}
	w.stats.Processes++
	w.begin("M")
	w.str("name", "process_name")
	w.num("pid", int64(p.pid))
	w.raw(`,"args":{"name":`)
	w.jstr(label)
	w.raw("}")
	w.end()
	return p
}

func (w *Writer) thread(p *proc, tid int, name string) { w.threadSorted(p, tid, tid, name) }

// threadSorted names a track and gives its place among its process's tracks.
func (w *Writer) threadSorted(p *proc, tid, sortIndex int, name string) {
	if p.threads[tid] {
		return
	}
	p.threads[tid] = true
	w.begin("M")
	w.str("name", "thread_name")
	w.num("pid", int64(p.pid))
	w.num("tid", int64(tid))
	w.raw(`,"args":{"name":`)
	w.jstr(name)
	w.raw("}")
	w.end()
	w.begin("M")
	w.str("name", "thread_sort_index")
	w.num("pid", int64(p.pid))
	w.num("tid", int64(tid))
	w.raw(`,"args":{"sort_index":`)
	w.buf = strconv.AppendInt(w.buf, int64(sortIndex), 10)
	w.raw("}")
	w.end()
}

func (w *Writer) replay(p *proc, ts int64, b *hook.Replay) {
	w.thread(p, tidSteps, "engine steps")
	start, dur := ts, b.DurNS
	if dur > 0 {
		start = ts - dur
	} else {
		dur = 0
	}
	mode := b.Mode
	if mode == "" {
		mode = "step"
	}
	w.begin("X")
	w.str("name", mode+" bs="+strconv.Itoa(b.BatchSize))
	w.str("cat", "step")
	w.ts("ts", start)
	w.dur(dur)
	w.ids(p.pid, tidSteps)
	w.args(func() {
		w.argInt("step", int64(b.Step))
		w.argInt("bs", int64(b.BatchSize))
		w.argInt("bucket", int64(b.Bucket))
		w.arg("mode", b.Mode)
	})
	w.end()
	w.stats.Steps++
}

// findingName is a finding's short name on the timeline.
func findingName(f *hook.Finding) string {
	switch {
	case f.Analyzer == "checksum":
		return "room mismatch"
	case f.Evidence["class"] == "LIVE-PAGE-OVERWRITE" || strings.HasPrefix(f.Summary, "LIVE-PAGE-OVERWRITE"):
		return "LIVE-PAGE-OVERWRITE"
	case f.Analyzer == "canary" && f.Evidence["class"] != "":
		return f.Evidence["class"]
	case f.Analyzer == "graphdiff":
		return "graph≠eager"
	case f.Analyzer != "":
		return f.Analyzer
	}
	return "finding"
}

func (w *Writer) finding(p *proc, ts int64, f *hook.Finding) {
	w.instant(p, tidFindings, ts, findingName(f), "finding", func() {
		w.arg("analyzer", f.Analyzer)
		w.arg("severity", string(f.Severity))
		w.arg("summary", f.Summary)
		for _, k := range slices.Sorted(maps.Keys(f.Evidence)) {
			w.arg(k, f.Evidence[k])
		}
	})
	w.stats.Findings++
}

func (w *Writer) session(p *proc, ts int64, s *hook.Session) {
	name := "session " + s.ID + ": " + s.Outcome
	switch s.Outcome {
	case hook.OutcomeLeak, hook.OutcomeNoTool, hook.OutcomeError:
		name = "CORRUPTED " + name
	}
	w.instant(p, tidSessions, ts, name, "session", func() {
		w.arg("id", s.ID)
		w.arg("outcome", s.Outcome)
		w.argInt("rounds", int64(s.Rounds))
		w.arg("reason", s.Reason)
		if s.Round > 0 {
			w.argInt("round", int64(s.Round))
		}
		if len(s.Requests) > 0 {
			w.arg("requests", strings.Join(s.Requests, ","))
		}
		if s.Deviated {
			w.arg("deviated", "true")
		}
		w.arg("excerpt", s.Excerpt)
	})
	w.stats.Sessions++
}

func (w *Writer) sched(p *proc, ts int64, s *hook.Sched) {
	if s.Phase == "retract" {
		w.retract[p.pid] += int64(max(s.Retracted, 0))
		w.counter(p, ts, "retractions (cumulative)", "retracted", float64(w.retract[p.pid]))
		return
	}
	w.counter(p, ts, "running requests", "running", float64(s.RunningReq))
	w.counter(p, ts, "queued requests", "queued", float64(s.QueueReq))
	w.counter(p, ts, "KV token usage (%)", "usage", 100*s.TokenUsage)
}

func (w *Writer) counter(p *proc, ts int64, name, series string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	w.begin("C")
	w.str("name", name)
	w.ts("ts", ts)
	w.num("pid", int64(p.pid))
	w.raw(`,"args":{`)
	w.jstr(series)
	w.raw(":")
	w.buf = strconv.AppendFloat(w.buf, v, 'g', -1, 64)
	w.raw("}")
	w.end()
	w.stats.Counters++
}

func (w *Writer) roomChecksum(p *proc, ts int64, c *hook.RoomChecksum) {
	id := uint64(c.Room)
	o, ok := w.rooms[id]
	if !ok || o.side == c.Side {
		if !ok {
			if len(w.rooms) >= MaxRooms {
				w.stats.Dropped++
				return
			}
			w.rooms[id] = room{ts: ts, pid: p.pid, side: c.Side, bsum: c.Bsum, xxh3: c.XXH3, req: c.Request}
		}
		return
	}
	delete(w.rooms, id)
	pre, dec := o, room{ts: ts, pid: p.pid, side: c.Side, bsum: c.Bsum, xxh3: c.XXH3, req: c.Request}
	if c.Side == hook.SidePrefill {
		pre, dec = dec, pre
	}
	start, stop := min(pre.ts, dec.ts), max(pre.ts, dec.ts)
	rid := strconv.FormatUint(id, 10)
	match := pre.bsum == dec.bsum && pre.xxh3 == dec.xxh3
	for _, ph := range []string{"b", "e"} {
		w.begin(ph)
		w.str("name", "PD transfer")
		w.str("cat", "pd")
		w.str("id", rid)
		if ph == "b" {
			w.ts("ts", start)
		} else {
			w.ts("ts", stop)
		}
		w.ids(dec.pid, tidSteps)
		if ph == "b" {
			w.args(func() {
				w.arg("room", rid)
				w.arg("request", pre.req)
				w.arg("prefill_bsum", pre.bsum.String())
				w.arg("decode_bsum", dec.bsum.String())
				w.arg("prefill_xxh3", pre.xxh3.String())
				w.arg("decode_xxh3", dec.xxh3.String())
				w.argBool("match", &match)
			})
		}
		w.end()
	}
	w.stats.Transfers++
}

// cudaClass sorts a driver call by name (symbol, variant suffix allowed).
func cudaClass(call string) string {
	switch {
	case strings.HasPrefix(call, "cuGraphLaunch"):
		return "graph"
	case strings.HasPrefix(call, "cuStreamBeginCapture"):
		return "begin"
	case strings.HasPrefix(call, "cuStreamEndCapture"):
		return "end"
	case strings.HasPrefix(call, "cuEventRecord"):
		return "record"
	case strings.HasPrefix(call, "cuStreamWaitEvent"):
		return "wait"
	case strings.HasPrefix(call, "cuLaunch"):
		return "launch"
	case strings.HasPrefix(call, "cuMemcpy") && strings.Contains(call, "Async"),
		strings.HasPrefix(call, "cuMemset") && strings.Contains(call, "Async"):
		return "copy"
	}
	return ""
}

// cudaTrack returns the tid of a CUDA track, naming it when it is new, or
// tidStreams0 (the process's shared overflow track) past MaxStreams.
func (w *Writer) cudaTrack(p *proc, k trackKey) int {
	if tid, ok := w.tracks[k]; ok {
		return tid
	}
	if len(w.tracks) >= MaxStreams {
		w.thread(p, tidStreams0, "other CUDA calls")
		return tidStreams0
	}
	sk := streamKey{p.pid, k.stream}
	sortIndex := tidDriver
	if k.kind != trackDriver {
		if _, ok := w.streams[sk]; !ok {
			w.streams[sk] = w.nStreams[p.pid]
			w.nStreams[p.pid]++
			w.stats.Streams++
		}
		sortIndex = tidStream1 + w.streams[sk]*sortPerStream
	}
	if w.nextTID[p.pid] == 0 {
		w.nextTID[p.pid] = tidStream1
	}
	tid := w.nextTID[p.pid]
	w.nextTID[p.pid]++
	w.tracks[k] = tid
	w.stats.CUDATracks++
	stream := "CUDA stream " + hook.Hex64(k.stream).String()
	if k.stream == 0 {
		stream = "CUDA stream 0 (legacy default)"
	}
	thread := " · thread " + strconv.FormatUint(uint64(k.host), 10)
	var name string
	switch k.kind {
	case trackCapture:
		name = stream + " · graph capture"
	case trackDriver:
		name = "CUDA driver calls" + thread
	default:
		w.nThreads[sk]++
		sortIndex += min(w.nThreads[sk], sortPerStream-1)
		name = stream + thread
	}
	w.threadSorted(p, tid, sortIndex, name)
	return tid
}

func (w *Writer) cuda(p *proc, ts int64, c *hook.CUDA) {
	if c.StartNS != 0 {
		ts = c.StartNS
	}
	dur := int64(0)
	if c.EndNS > ts {
		dur = c.EndNS - ts
	}
	w.last = max(w.last, ts+max(dur, 1))
	class := cudaClass(c.Call)
	tk := trackKey{pid: p.pid, stream: uint64(c.Stream), host: c.TID, kind: trackCalls}
	if class == "" {
		tk = trackKey{pid: p.pid, host: c.TID, kind: trackDriver}
	}
	tid := w.cudaTrack(p, tk)
	k := streamKey{p.pid, uint64(c.Stream)}
	switch class {
	case "begin":
		w.stats.Captures++
		ctid := w.cudaTrack(p, trackKey{pid: p.pid, stream: uint64(c.Stream), kind: trackCapture})
		if ctid == tidStreams0 {
			w.instant(p, ctid, ts, "graph capture begins", "cuda", func() {})
			break
		}
		w.capture[k] = append(w.capture[k], capture{ctid, ts})
		w.begin("B")
		w.str("name", "graph capture")
		w.str("cat", "cuda")
		w.ts("ts", ts)
		w.ids(p.pid, ctid)
		w.end()
	case "end":
		open := w.capture[k]
		if len(open) == 0 {
			if _, ok := w.tracks[trackKey{pid: p.pid, stream: uint64(c.Stream), kind: trackCapture}]; !ok && len(w.tracks) >= MaxStreams {
				w.instant(p, tidStreams0, ts+dur, "graph capture ends", "cuda", func() { w.arg("graph", c.Arg.String()) })
			}
			break
		}
		b := open[len(open)-1]
		w.capture[k] = open[:len(open)-1]
		w.begin("E")
		w.ts("ts", max(ts+dur, b.ts)) // an end seen from another thread may carry an earlier clock
		w.ids(p.pid, b.tid)
		w.args(func() { w.arg("graph", c.Arg.String()) })
		w.end()
	}
	name := c.Call
	switch class {
	case "graph":
		name = "graph replay " + c.GraphExec.String()
	case "record":
		name = "event record " + c.Arg.String()
	case "wait":
		name = "wait event " + c.Arg.String()
	}
	// The overflow track is shared by threads and streams: a call that
	// would overlap the previous one there is written as an instant.
	ph := "X"
	if tid == tidStreams0 {
		if ts < w.other[p.pid] {
			ph = "i"
			w.stats.Unnested++
		} else {
			w.other[p.pid] = ts + max(dur, 1)
		}
	}
	w.begin(ph)
	w.str("name", name)
	w.str("cat", "cuda")
	w.ts("ts", ts)
	if ph == "X" {
		w.dur(max(dur, 1)) // a flow binds to a slice that encloses its time
	} else {
		w.str("s", "t")
	}
	w.ids(p.pid, tid)
	w.args(func() {
		if ph == "i" {
			w.argInt("dur_ns", dur)
		}
		w.arg("call", c.Call)
		w.argInt("tid", int64(c.TID))
		if c.Stream != 0 {
			w.arg("stream", c.Stream.String())
		}
		if c.GraphExec != 0 {
			w.arg("graph_exec", c.GraphExec.String())
		}
		if c.Arg != 0 {
			w.arg("arg", c.Arg.String())
		}
		if c.Bytes != 0 {
			w.argInt("bytes", int64(c.Bytes))
		}
		if c.Ret != 0 {
			w.argInt("ret", int64(c.Ret))
		}
	})
	w.end()
	w.stats.CUDACalls++
	ek := streamKey{p.pid, uint64(c.Arg)}
	switch class {
	case "record":
		if _, ok := w.flows[ek]; !ok && len(w.flows) >= MaxFlows {
			w.stats.Dropped++
			return
		}
		w.nextFlow++
		w.flows[ek] = w.nextFlow
		w.flow("s", w.nextFlow, ts, p.pid, tid, c.Arg)
	case "wait":
		id, ok := w.flows[ek]
		if !ok {
			w.stats.UnmatchedWait++
			return
		}
		delete(w.flows, ek)
		w.flow("f", id, ts, p.pid, tid, c.Arg)
		w.stats.Flows++
	}
}

func (w *Writer) flow(ph string, id uint64, ts int64, pid, tid int, event hook.Hex64) {
	w.begin(ph)
	w.str("name", "event "+event.String())
	w.str("cat", "cuda.event")
	w.num("id", int64(id))
	w.ts("ts", ts)
	w.ids(pid, tid)
	if ph == "f" {
		w.str("bp", "e")
	}
	w.end()
}

func (w *Writer) instant(p *proc, tid int, ts int64, name, cat string, args func()) {
	switch tid {
	case tidFindings:
		w.thread(p, tid, "findings")
	case tidSessions:
		w.thread(p, tid, "sessions")
	}
	w.begin("i")
	w.str("name", name)
	w.str("cat", cat)
	w.str("s", "t")
	w.ts("ts", ts)
	w.ids(p.pid, tid)
	w.args(args)
	w.end()
}

// Close writes what is left (rooms with one side as instants) and ends the
// JSON. It does not close the underlying writer. It returns the first write
// error.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.err
	}
	for _, id := range slices.Sorted(maps.Keys(w.rooms)) {
		r := w.rooms[id]
		p := w.overflow
		for _, q := range w.procs {
			if q.pid == r.pid {
				p = q
			}
		}
		w.instant(p, tidFindings, r.ts, "room with one side only", "pd", func() {
			w.arg("room", strconv.FormatUint(id, 10))
			w.arg("side", string(r.side))
			w.arg("request", r.req)
		})
		w.stats.RoomsUnpaired++
	}
	// Capture windows never ended: close them at the latest time seen so
	// the B has its E, and say so.
	for _, k := range slices.SortedFunc(maps.Keys(w.capture), func(a, b streamKey) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.stream, b.stream))
	}) {
		open := w.capture[k]
		for i := len(open) - 1; i >= 0; i-- {
			w.begin("E")
			w.ts("ts", max(w.last, open[i].ts))
			w.ids(k.pid, open[i].tid)
			w.raw(`,"args":{"cut":"true"}`)
			w.end()
			w.stats.CapturesCut++
		}
	}
	w.capture = nil
	w.closed = true
	if w.first {
		w.raw(`{"displayTimeUnit":"ns","traceEvents":[`)
	}
	w.raw("\n],\"otherData\":{\"tool\":\"kvcanary\",\"base_unix_ns\":")
	w.buf = strconv.AppendInt(w.buf, w.base, 10)
	w.raw("}}\n")
	w.flushBuf()
	if err := w.w.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// ---------------------------------------------------------------------------
// Record encoding: each record is built in w.buf and written at end().

func (w *Writer) begin(ph string) {
	if w.first {
		w.raw(`{"displayTimeUnit":"ns","traceEvents":[` + "\n")
		w.first = false
	} else {
		w.raw(",\n")
	}
	w.raw(`{"ph":"`)
	w.raw(ph)
	w.raw(`"`)
}

func (w *Writer) end() {
	w.raw("}")
	w.stats.TraceEvents++
	if len(w.buf) > 32<<10 {
		w.flushBuf()
	}
}

func (w *Writer) flushBuf() {
	if w.err == nil {
		_, w.err = w.w.Write(w.buf)
	}
	w.buf = w.buf[:0]
}

func (w *Writer) raw(s string) { w.buf = append(w.buf, s...) }

func (w *Writer) str(k, v string) {
	w.buf = append(w.buf, ',', '"')
	w.buf = append(w.buf, k...)
	w.buf = append(w.buf, '"', ':')
	w.jstr(v)
}

func (w *Writer) num(k string, v int64) {
	w.buf = append(w.buf, ',', '"')
	w.buf = append(w.buf, k...)
	w.buf = append(w.buf, '"', ':')
	w.buf = strconv.AppendInt(w.buf, v, 10)
}

func (w *Writer) ids(pid, tid int) {
	w.num("pid", int64(pid))
	w.num("tid", int64(tid))
}

// ts writes a Unix-nanosecond time as microseconds since the base, with
// three decimals (exact nanoseconds).
func (w *Writer) ts(k string, ns int64) {
	w.buf = append(w.buf, ',', '"')
	w.buf = append(w.buf, k...)
	w.buf = append(w.buf, '"', ':')
	w.micros(ns - w.base)
}

func (w *Writer) dur(ns int64) {
	w.buf = append(w.buf, `,"dur":`...)
	w.micros(ns)
}

func (w *Writer) micros(d int64) {
	if d < 0 {
		w.buf = append(w.buf, '-')
		if d == math.MinInt64 {
			d++
		}
		d = -d
	}
	w.buf = strconv.AppendInt(w.buf, d/1000, 10)
	if f := d % 1000; f != 0 {
		w.buf = append(w.buf, '.', byte('0'+f/100), byte('0'+f/10%10), byte('0'+f%10))
	}
}

// args writes "args":{…} with the members fill adds (arg, argInt, argBool).
func (w *Writer) args(fill func()) {
	w.raw(`,"args":{`)
	n := len(w.buf)
	fill()
	if len(w.buf) > n && w.buf[n] == ',' { // drop the first member's comma
		copy(w.buf[n:], w.buf[n+1:])
		w.buf = w.buf[:len(w.buf)-1]
	}
	w.raw("}")
}

// arg adds a string member; "" (not observed) is left out.
func (w *Writer) arg(k, v string) {
	if v != "" {
		w.str(k, v)
	}
}

func (w *Writer) argInt(k string, v int64) { w.num(k, v) }

// argBool adds a boolean member; nil (unknown) is left out.
func (w *Writer) argBool(k string, v *bool) {
	if v != nil {
		w.str(k, strconv.FormatBool(*v))
	}
}

// jstr appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD, and <, >, & as
// \u escapes so the file is safe to embed in HTML.
func (w *Writer) jstr(s string) { w.buf = AppendString(w.buf, s) }

// AppendString appends s to b as a JSON string literal (see Writer).
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
