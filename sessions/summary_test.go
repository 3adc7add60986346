package sessions

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/logscan"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

func TestHeadlineSeedsForm(t *testing.T) {
	cases := []struct {
		o    outcome.Counts
		want string
	}{
		{outcome.Counts{Done: 8, MaxRounds: 58, Leak: 14},
			"CORRUPTION sessions: 14/80 = 18% (leak=14 no_tool=0 error=0 intact[done/maxrounds]=66) 95% CI [10.7%, 27.3%]"},
		{outcome.Counts{Done: 8, MaxRounds: 26, Leak: 6},
			"CORRUPTION sessions: 6/40 = 15% (leak=6 no_tool=0 error=0 intact[done/maxrounds]=34) 95% CI [7.1%, 29.1%]"},
		{outcome.Counts{Done: 77, NoTool: 1, Error: 2},
			"CORRUPTION sessions: 3/80 = 4% (leak=0 no_tool=1 error=2 intact[done/maxrounds]=77) 95% CI [1.3%, 10.5%]"},
		{outcome.Counts{Done: 70, Timeout: 10},
			"CORRUPTION sessions: 0/80 = 0% (leak=0 no_tool=0 error=0 timeout=10 intact[done/maxrounds]=70) 95% CI [0.0%, 4.6%]"},
		{outcome.Counts{}, "CORRUPTION sessions: 0/0 = 0% (leak=0 no_tool=0 error=0 intact[done/maxrounds]=0) 95% CI [0.0%, 100.0%]"},
	}
	for _, c := range cases {
		if got := outcome.SummaryOf(c.o, 4, time.Second).Headline(); got != c.want {
			t.Errorf("headline\n got %s\nwant %s", got, c.want)
		}
	}
}

func TestSummaryJSONContract(t *testing.T) {
	s := outcome.SummaryOf(outcome.Counts{Done: 8, MaxRounds: 58, Leak: 14}, 4, 1500*time.Millisecond)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"sessions", "rounds", "outcomes", "corrupted_sessions", "corruption_rate", "wilson95", "wall_seconds"} {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing from %s", k, b)
		}
	}
	out := m["outcomes"].(map[string]any)
	for _, k := range hook.Outcomes {
		if _, ok := out[k]; !ok {
			t.Errorf("outcome %q missing from %s", k, b)
		}
	}
	if m["sessions"].(float64) != 80 || m["corrupted_sessions"].(float64) != 14 || m["corruption_rate"].(float64) != 0.175 || m["wall_seconds"].(float64) != 1.5 {
		t.Errorf("values: %s", b)
	}
	if w := m["wilson95"].([]any); len(w) != 2 || w[0].(float64) >= 0.175 || w[1].(float64) <= 0.175 {
		t.Errorf("wilson95: %v", w)
	}
}

func TestOutcomesAdd(t *testing.T) {
	var o outcome.Counts
	for _, c := range hook.Outcomes {
		if !o.Add(c) {
			t.Errorf("Add(%q) rejected", c)
		}
	}
	if o.Add("weird") {
		t.Error("unknown class accepted")
	}
	if o.Total() != 6 || o.Corrupted() != 3 || o.OKish() != 2 {
		t.Errorf("outcomes = %+v", o)
	}
	for _, c := range hook.Outcomes {
		if o.Get(c) != 1 {
			t.Errorf("Get(%q) = %d", c, o.Get(c))
		}
		if outcome.IsCorrupted(c) != (c == hook.OutcomeLeak || c == hook.OutcomeNoTool || c == hook.OutcomeError) {
			t.Errorf("IsCorrupted(%q) wrong", c)
		}
	}
}

// run builds the events of a synthetic run.
type statsRunSpec struct {
	cfg        hook.RunConfig
	host       hook.HostInfo
	tool       string
	outcomes   outcome.Counts
	rounds     int   // rounds each session reports
	running    []int // decode batch #running-req, in order
	usage      float64
	retracts   []int // retracted counts
	wall       time.Duration
	noRunStart bool
}

func (s statsRunSpec) events() []hook.Event {
	var evs []hook.Event
	ts := int64(1_750_000_000_000_000_000)
	next := func(b hook.Body) {
		ts += int64(time.Millisecond)
		evs = append(evs, hook.Event{Kind: b.Kind(), TS: ts, Body: b})
	}
	if !s.noRunStart {
		next(&hook.RunStart{Tool: s.tool, Config: s.cfg, Host: s.host})
	}
	for i, r := range s.running {
		next(&hook.Sched{Phase: "decode", RunningReq: r, TokenUsage: s.usage * float64(i+1) / float64(len(s.running))})
	}
	for _, n := range s.retracts {
		next(&hook.Sched{Phase: "retract", Retracted: n})
	}
	i := 0
	for _, c := range hook.Outcomes {
		for k := 0; k < s.outcomes.Get(c); k++ {
			next(&hook.Session{ID: fmt.Sprintf("s%03d", i), Outcome: c, Rounds: s.rounds})
			i++
		}
	}
	next(&hook.GPU{Devices: make([]hook.GPUDevice, len(s.host.GPUs))})
	next(&hook.RunEnd{WallNS: int64(s.wall)})
	return evs
}

func (s statsRunSpec) stats(name string) *RunStats {
	r := NewRunStats(name)
	for _, ev := range s.events() {
		r.Observe(ev)
	}
	return r
}

func TestRunStatsFromEvents(t *testing.T) {
	spec := statsRunSpec{
		cfg:  hook.RunConfig{Engine: "sim", IndexKDtype: "bf16", CUDAGraph: hook.Bool(true), Sessions: 80, Rounds: 4, Concurrency: 80},
		host: hook.HostInfo{Hostname: "box", GPUs: []hook.GPUInfo{{Name: "H200"}, {Name: "H200"}}},
		tool: "v1", outcomes: outcome.Counts{Done: 8, MaxRounds: 58, Leak: 14}, rounds: 3,
		running: []int{10, 60, 40}, usage: 1.0, retracts: []int{3}, wall: 2 * time.Second,
	}
	r := spec.stats("base")
	if r.Outcomes != spec.outcomes || r.Rounds() != 4 || r.MaxSessionRounds != 3 {
		t.Errorf("outcomes/rounds: %+v rounds=%d", r.Outcomes, r.Rounds())
	}
	want := SchedStats{Observations: 4, PeakRunningReq: 60, PeakTokenUsage: 1.0, Retractions: 3, RetractionEvents: 1, DecodeBatches: 3}
	if r.Sched != want {
		t.Errorf("sched = %+v, want %+v", r.Sched, want)
	}
	if r.GPUCount() != 2 || r.GPUModels() != "H200" || r.Tool != "v1" || r.Config.Concurrency != 80 || r.Wall() != 2*time.Second {
		t.Errorf("facts: gpus=%d model=%q tool=%q cfg=%+v wall=%v", r.GPUCount(), r.GPUModels(), r.Tool, r.Config, r.Wall())
	}
	s := r.Summary()
	if s.Sessions != 80 || s.CorruptedSessions != 14 || s.Rounds != 4 || s.WallSeconds != 2 {
		t.Errorf("summary = %+v", s)
	}

	// Without run.start or config: rounds fall back to what sessions ran;
	// without run.end: wall is the event span.
	spec.noRunStart, spec.wall = true, 0
	r = spec.stats("bare")
	if r.Rounds() != 3 || r.HaveManifest {
		t.Errorf("bare rounds = %d manifest=%v", r.Rounds(), r.HaveManifest)
	}
	if r.Wall() <= 0 {
		t.Errorf("bare wall = %v", r.Wall())
	}
	r.Observe(hook.Event{Kind: hook.KindSession, Body: &hook.Session{Outcome: "mystery"}})
	if r.UnknownOutcomes != 1 || r.Outcomes.Total() != 80 {
		t.Errorf("unknown outcome: %d total %d", r.UnknownOutcomes, r.Outcomes.Total())
	}
}

func TestManifestWinsOverRunStart(t *testing.T) {
	r := NewRunStats("x")
	r.SetManifest("kvcanary v2", time.Unix(0, 0), hook.HostInfo{Hostname: "m"}, hook.RunConfig{Rounds: 6})
	r.Observe(hook.Event{Kind: hook.KindRunStart, Body: &hook.RunStart{Tool: "v1", Config: hook.RunConfig{Rounds: 4}, Host: hook.HostInfo{Hostname: "s"}}})
	if r.Config.Rounds != 6 || r.Tool != "kvcanary v2" || r.Host.Hostname != "m" {
		t.Errorf("manifest overridden: %+v %q %q", r.Config, r.Tool, r.Host.Hostname)
	}
	// An empty manifest config (a collector knows no engine flags) is filled from run.start.
	r = NewRunStats("y")
	r.SetManifest("kvcanary v2", time.Unix(0, 0), hook.HostInfo{}, hook.RunConfig{})
	r.Observe(hook.Event{Kind: hook.KindRunStart, Body: &hook.RunStart{Tool: "v1", Config: hook.RunConfig{Rounds: 4}, Host: hook.HostInfo{Hostname: "s"}}})
	if r.Config.Rounds != 4 || r.Tool != "kvcanary v2" || r.Host.Hostname != "s" {
		t.Errorf("run.start not used: %+v %q %q", r.Config, r.Tool, r.Host.Hostname)
	}
}

type eventSlice struct {
	evs []hook.Event
	err error
}

func (s *eventSlice) Next() (hook.Event, error) {
	if len(s.evs) == 0 {
		if s.err != nil {
			return hook.Event{}, s.err
		}
		return hook.Event{}, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

func TestReadRun(t *testing.T) {
	spec := statsRunSpec{outcomes: outcome.Counts{Done: 3, Leak: 1}, rounds: 2}
	r := NewRunStats("s")
	if err := ReadRun(&eventSlice{evs: spec.events()}, r); err != nil {
		t.Fatal(err)
	}
	if r.Outcomes.Total() != 4 {
		t.Errorf("total = %d", r.Outcomes.Total())
	}
	boom := errors.New("disk")
	r = NewRunStats("s")
	if err := ReadRun(&eventSlice{evs: spec.events(), err: boom}, r); !errors.Is(err, boom) || r.Outcomes.Total() != 4 {
		t.Errorf("err = %v, total = %d", err, r.Outcomes.Total())
	}
}

// A server log scanned by logscan feeds RunStats through sched events, so A/B
// sees a real engine's peak load and retractions.
func TestSchedFromServerLog(t *testing.T) {
	log := `[2025-06-01 12:00:02 TP0] Decode batch, #running-req: 58, #token: 80000, token usage: 0.92, cuda graph: True, gen throughput (token/s): 2600.10, #queue-req: 10, 
[2025-06-01 12:00:03 TP0] Decode batch, #running-req: 60, #token: 87282, token usage: 1.00, cuda graph: True, gen throughput (token/s): 2529.33, #queue-req: 13, 
[2025-06-01 12:00:03 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4100 -> 0.7000
INFO 06-01 12:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 930.1 tokens/s, Running: 12 reqs, Waiting: 0 reqs, Preemptions: 2, GPU KV cache usage: 50.0%, Prefix cache hit rate: 0.0%
`
	sc := logscan.NewScanner(strings.NewReader(log), "server.log", logscan.Options{Year: 2025})
	r := NewRunStats("with-log")
	var bodies []*hook.Sched
	for sc.Scan() {
		rec := sc.Record()
		bodies = rec.AppendSched(bodies[:0])
		for _, b := range bodies {
			r.Observe(hook.Event{Kind: hook.KindSched, TS: rec.TS, Body: b})
		}
	}
	want := SchedStats{Observations: 5, PeakRunningReq: 60, PeakTokenUsage: 1.0, Retractions: 5, RetractionEvents: 2, DecodeBatches: 3}
	if r.Sched != want {
		t.Errorf("sched = %+v, want %+v", r.Sched, want)
	}
}

// Issue 27 D8: a run that holds a session id twice (its events doubled by
// `trace merge a a`) is refused, and the repeat is not counted: before, ab
// counted 4/20 sessions instead of 2/10.
func TestRunStatsRefusesDuplicateSessionIDs(t *testing.T) {
	r := NewRunStats("doubled.kvtrace")
	for range 2 {
		for i, o := range []string{hook.OutcomeDone, hook.OutcomeLeak, hook.OutcomeDone} {
			r.Observe(hook.Event{Kind: hook.KindSession, Body: &hook.Session{ID: fmt.Sprintf("s%03d", i), Outcome: o}})
		}
	}
	if n := r.Summary().Sessions; n != 3 {
		t.Errorf("doubled run: %d sessions counted, want 3", n)
	}
	err := r.CheckSessionIDs()
	if err == nil || !strings.Contains(err.Error(), "3 session events repeat an id") || !strings.Contains(err.Error(), "first s000") {
		t.Fatalf("CheckSessionIDs on a doubled run: %v, want a refusal naming the count and s000", err)
	}
	once := NewRunStats("once.kvtrace")
	once.Observe(hook.Event{Kind: hook.KindSession, Body: &hook.Session{ID: "s000", Outcome: hook.OutcomeDone}})
	if err := once.CheckSessionIDs(); err != nil {
		t.Fatal(err)
	}
}
