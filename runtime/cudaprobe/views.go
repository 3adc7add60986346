package cudaprobe

import (
	"fmt"
	"sort"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Views derives graph-level facts from CUDA calls fed in arrival order (the
// probe delivers each call when it returns; per thread that is call order).
// It works on live probe output and on recorded hook.CUDA events alike. Memory
// is bounded: open state per process plus at most MaxCaptures closed captures
// and MaxHints hints (the totals are still counted).
type Views struct {
	MaxCaptures int // default 4096
	MaxHints    int // default 256

	procs      map[uint32]*procState
	calls      map[string]uint64
	events     uint64
	first      int64
	last       int64
	captures   []*Capture
	capDropped int
	hints      []*Hint
	hintsTotal int
}

// Capture is one stream-capture window: cuStreamBeginCapture on the origin
// stream to cuStreamEndCapture on it.
type Capture struct {
	PID          uint32        `json:"pid"`
	Origin       hook.Hex64    `json:"origin"`
	StartNS      int64         `json:"start_ns"`
	EndNS        int64         `json:"end_ns"`
	Graph        hook.Hex64    `json:"graph,omitempty"`
	Execs        []hook.Hex64  `json:"execs,omitempty"`  // graph execs instantiated from it
	Joined       []hook.Hex64  `json:"joined,omitempty"` // streams that joined, in join order
	Launches     int           `json:"launches"`         // stream-ordered work captured on all member streams
	SideLaunches int           `json:"side_launches"`    // of which on joined streams
	Replays      uint64        `json:"replays"`          // cuGraphLaunch of its execs afterwards
	Open         bool          `json:"open,omitempty"`   // still capturing when the summary was taken
	state        *captureState // nil once closed
	waiting      []*Hint       // hints waiting for the next replay
}

// Hint flags work captured on a side stream with no event wait back to the
// origin stream before the capture ended: in the replayed graph nothing orders
// it before the origin stream's later work or the next replay, the shape of a
// multi-stream overlap race.
type Hint struct {
	PID            uint32     `json:"pid"`
	Origin         hook.Hex64 `json:"origin"`
	Side           hook.Hex64 `json:"side"`
	Call           string     `json:"call"`
	LaunchNS       int64      `json:"launch_ns"`
	CaptureStartNS int64      `json:"capture_start_ns"`
	CaptureEndNS   int64      `json:"capture_end_ns"`
	Graph          hook.Hex64 `json:"graph,omitempty"`
	Exec           hook.Hex64 `json:"exec,omitempty"`           // exec of the next replay
	NextReplayNS   int64      `json:"next_replay_ns,omitempty"` // 0 when no replay was seen
}

// String describes the hint in one line.
func (h *Hint) String() string {
	s := fmt.Sprintf("pid %d: %s on side stream %s at +%.3fms of the capture on %s has no event wait back to %s before the capture ended",
		h.PID, h.Call, h.Side, float64(h.LaunchNS-h.CaptureStartNS)/1e6, h.Origin, h.Origin)
	if h.NextReplayNS != 0 {
		s += fmt.Sprintf("; replayed as exec %s", h.Exec)
	}
	return s
}

// StreamReplays counts graph replays on one stream.
type StreamReplays struct {
	PID     uint32     `json:"pid"`
	Stream  hook.Hex64 `json:"stream"`
	Replays uint64     `json:"replays"`
	Execs   int        `json:"execs"` // distinct graph execs launched
	FirstNS int64      `json:"first_ns"`
	LastNS  int64      `json:"last_ns"`
	// PerSec is (Replays-1) over the first-to-last span; 0 with fewer than two.
	PerSec float64 `json:"per_sec"`
}

// Summary is a snapshot of the views.
type Summary struct {
	Events          uint64            `json:"events"`
	SpanNS          int64             `json:"span_ns"`
	Calls           map[string]uint64 `json:"calls"` // by entry point without variant suffix
	Replays         []StreamReplays   `json:"replays"`
	Captures        []Capture         `json:"captures"`
	CapturesDropped int               `json:"captures_dropped,omitempty"`
	Hints           []Hint            `json:"hints"`
	HintsTotal      int               `json:"hints_total"`
}

type procState struct {
	open    map[hook.Hex64]*captureState // by origin stream
	member  map[hook.Hex64]*captureState // stream → capture it belongs to
	events  map[hook.Hex64]eventRecord   // event handle → its last record
	graphs  map[hook.Hex64]*Capture      // graph → capture that produced it
	execs   map[hook.Hex64]*Capture      // exec → capture
	streams map[hook.Hex64]*streamState
}

type streamState struct {
	r     StreamReplays
	execs map[hook.Hex64]struct{}
}

type captureState struct {
	c          *Capture
	side       map[hook.Hex64][]sideLaunch
	joinedUpTo map[hook.Hex64]int // side stream → launches covered by a wait on the origin
}

type sideLaunch struct {
	call string
	ns   int64
}

type eventRecord struct {
	stream hook.Hex64
	cap    *captureState
	upTo   int // side launches on stream before the record
}

func (v *Views) proc(pid uint32) *procState {
	if v.procs == nil {
		v.procs = map[uint32]*procState{}
		v.calls = map[string]uint64{}
	}
	p := v.procs[pid]
	if p == nil {
		p = &procState{
			open: map[hook.Hex64]*captureState{}, member: map[hook.Hex64]*captureState{},
			events: map[hook.Hex64]eventRecord{}, graphs: map[hook.Hex64]*Capture{},
			execs: map[hook.Hex64]*Capture{}, streams: map[hook.Hex64]*streamState{},
		}
		v.procs[pid] = p
	}
	return p
}

// Add feeds one call.
func (v *Views) Add(c *hook.CUDA) {
	p := v.proc(c.PID)
	si, _, known := splitName(c.Call)
	base, kind := c.Call, KindOther
	if known {
		base, kind = Specs[si].Base, Specs[si].Kind
	}
	v.calls[base]++
	v.events++
	if v.first == 0 || c.StartNS < v.first {
		v.first = c.StartNS
	}
	if end := max(c.EndNS, c.StartNS); end > v.last {
		v.last = end
	}
	switch kind {
	case KindBeginCapture:
		if old := p.open[c.Stream]; old != nil {
			v.close(p, old, c.StartNS, 0) // begun again: the old one was abandoned
		}
		cs := &captureState{
			c:          &Capture{PID: c.PID, Origin: c.Stream, StartNS: c.StartNS, Open: true},
			side:       map[hook.Hex64][]sideLaunch{},
			joinedUpTo: map[hook.Hex64]int{},
		}
		cs.c.state = cs
		p.open[c.Stream] = cs
		p.member[c.Stream] = cs
	case KindEndCapture:
		if cs := p.open[c.Stream]; cs != nil {
			v.close(p, cs, max(c.EndNS, c.StartNS), c.Arg)
		}
	case KindEventRecord:
		r := eventRecord{stream: c.Stream}
		if cs := p.member[c.Stream]; cs != nil {
			r.cap, r.upTo = cs, len(cs.side[c.Stream])
		}
		p.events[c.Arg] = r
	case KindWaitEvent:
		r, ok := p.events[c.Arg]
		if !ok || r.cap == nil || r.cap.c.state == nil {
			break
		}
		cs := r.cap
		if p.member[c.Stream] == nil {
			p.member[c.Stream] = cs
			cs.c.Joined = append(cs.c.Joined, c.Stream)
		}
		if c.Stream == cs.c.Origin && r.stream != cs.c.Origin && r.upTo > cs.joinedUpTo[r.stream] {
			cs.joinedUpTo[r.stream] = r.upTo
		}
	case KindLaunch, KindMemcpyAsync:
		v.captured(p, c)
	case KindInstantiate:
		if cp := p.graphs[c.Arg]; cp != nil && c.GraphExec != 0 {
			cp.Execs = append(cp.Execs, c.GraphExec)
			p.execs[c.GraphExec] = cp
		}
	case KindGraphLaunch:
		if v.captured(p, c) {
			break // a graph launched into a capture is a child node, not a replay
		}
		s := p.streams[c.Stream]
		if s == nil {
			s = &streamState{r: StreamReplays{PID: c.PID, Stream: c.Stream, FirstNS: c.StartNS}, execs: map[hook.Hex64]struct{}{}}
			p.streams[c.Stream] = s
		}
		s.r.Replays++
		s.r.LastNS = c.StartNS
		s.execs[c.GraphExec] = struct{}{}
		if cp := p.execs[c.GraphExec]; cp != nil {
			cp.Replays++
			for _, h := range cp.waiting {
				h.NextReplayNS, h.Exec = c.StartNS, c.GraphExec
			}
			cp.waiting = nil
		}
	}
}

// captured counts stream-ordered work on a capturing stream; it reports
// whether the stream was capturing.
func (v *Views) captured(p *procState, c *hook.CUDA) bool {
	cs := p.member[c.Stream]
	if cs == nil {
		return false
	}
	cs.c.Launches++
	if c.Stream != cs.c.Origin {
		cs.c.SideLaunches++
		cs.side[c.Stream] = append(cs.side[c.Stream], sideLaunch{call: c.Call, ns: c.StartNS})
	}
	return true
}

// close ends a capture at ns with the produced graph, turning side-stream
// work not covered by a wait on the origin into hints.
func (v *Views) close(p *procState, cs *captureState, ns int64, graph hook.Hex64) {
	c := cs.c
	c.EndNS, c.Graph, c.Open, c.state = ns, graph, false, nil
	for _, s := range c.Joined {
		for _, l := range cs.side[s][cs.joinedUpTo[s]:] {
			h := &Hint{PID: c.PID, Origin: c.Origin, Side: s, Call: l.call, LaunchNS: l.ns,
				CaptureStartNS: c.StartNS, CaptureEndNS: ns, Graph: graph}
			v.hintsTotal++
			if len(v.hints) < v.limit(v.MaxHints, 256) {
				v.hints = append(v.hints, h)
				c.waiting = append(c.waiting, h)
			}
		}
	}
	for s, m := range p.member {
		if m == cs {
			delete(p.member, s)
		}
	}
	delete(p.open, c.Origin)
	if graph != 0 {
		p.graphs[graph] = c
	}
	if len(v.captures) < v.limit(v.MaxCaptures, 4096) {
		v.captures = append(v.captures, c)
	} else {
		v.capDropped++
	}
}

func (v *Views) limit(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

// Summary snapshots the views; open captures are listed with Open set.
func (v *Views) Summary() Summary {
	s := Summary{Events: v.events, SpanNS: v.last - v.first, Calls: map[string]uint64{},
		Replays: []StreamReplays{}, Captures: []Capture{}, Hints: []Hint{},
		CapturesDropped: v.capDropped, HintsTotal: v.hintsTotal}
	for k, n := range v.calls {
		s.Calls[k] = n
	}
	for _, c := range v.captures {
		s.Captures = append(s.Captures, c.copy())
	}
	pids := make([]uint32, 0, len(v.procs))
	for pid := range v.procs {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		p := v.procs[pid]
		for _, cs := range p.open {
			s.Captures = append(s.Captures, cs.c.copy())
		}
		for _, st := range p.streams {
			r := st.r
			r.Execs = len(st.execs)
			if r.Replays > 1 && r.LastNS > r.FirstNS {
				r.PerSec = float64(r.Replays-1) / (float64(r.LastNS-r.FirstNS) / 1e9)
			}
			s.Replays = append(s.Replays, r)
		}
	}
	sort.Slice(s.Replays, func(i, j int) bool {
		a, b := s.Replays[i], s.Replays[j]
		if a.PID != b.PID {
			return a.PID < b.PID
		}
		return a.Stream < b.Stream
	})
	sort.SliceStable(s.Captures, func(i, j int) bool {
		if s.Captures[i].PID != s.Captures[j].PID {
			return s.Captures[i].PID < s.Captures[j].PID
		}
		return s.Captures[i].StartNS < s.Captures[j].StartNS
	})
	for _, h := range v.hints {
		s.Hints = append(s.Hints, *h)
	}
	return s
}

func (c *Capture) copy() Capture {
	out := *c
	out.Execs = append([]hook.Hex64(nil), c.Execs...)
	out.Joined = append([]hook.Hex64(nil), c.Joined...)
	out.state = nil
	out.waiting = nil
	return out
}
