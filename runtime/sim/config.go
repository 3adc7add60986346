package sim

import (
	"fmt"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/pagediff"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Fault names accepted by Config.Inject.
const (
	FaultTransferRace = "transfer-race" // completion signalled before the last chunk lands
	FaultStaleOutLoc  = "stale-outloc"  // a retracted row's store lands on its freed out_loc
	FaultStaleSeqLen  = "stale-seqlen"  // the captured graph bakes the max seq len at capture
	FaultSpecMove     = "spec-move"     // IndexKeyCache.move indexes the page-indexed arena with token slot ids
)

// Faults lists the injectable faults.
var Faults = []string{FaultTransferRace, FaultStaleOutLoc, FaultStaleSeqLen, FaultSpecMove}

// Config is the engine's configuration: SGLang-named engine flags, the
// injected faults and which instruments publish events.
type Config struct {
	IndexKDtype        string   // "bf16" | "fp8" (--index-k-dtype)
	DisableCUDAGraph   bool     // --disable-cuda-graph
	CUDAGraphMaxBS     int      // --cuda-graph-max-bs
	MultiStreamOverlap bool     // --multi-stream-overlap (SGLANG_OPT_USE_MULTI_STREAM_OVERLAP)
	Disaggregation     string   // "pd" | "none" (--disaggregation)
	MaxRunningRequests int      // --max-running-requests
	PoolTokens         int      // --pool-tokens: decode index-K pool capacity in tokens
	Inject             []string // --inject
	Seed               uint64   // replay interleaving, rooms, transfer latencies
	// SpeculativeEagleTopK (--speculative-eagle-topk) is the draft tree's
	// branching: 0 or 1 is chain drafting (accepted tokens are already in
	// place, no moves); k ≥ 2 is tree drafting, where a request's accepted
	// token was verified in a draft slot with probability 1-1/k and is moved
	// to its final slot between decode steps (IndexKeyCache.move). The
	// spec-move fault implies 2 when it is lower.
	SpeculativeEagleTopK int

	PrefillPoolTokens    int // prefill worker pool (PD only)
	PrefillTokensPerStep int // prefill throughput per engine step
	TransferPagesPerStep int // transfer engine bandwidth in pages per step
	TransferChunkPages   int // pages per transfer chunk
	DecodeLogInterval    int // steps between "Decode batch" lines (SGLang: 40)
	TestRetractEvery     int // retract one request every N steps when bs > 10 (SGLANG_TEST_RETRACT); 0 off
	Workers              int // row-parallel workers; 0 = GOMAXPROCS (results never depend on it)

	Instruments Instruments
	Log         io.Writer // SGLang-format scheduler log lines; nil discards
	// Clock, when set, is the engine's clock for event timestamps and log
	// lines (the twin server passes the wall clock, so its events and a
	// client's share one clock). nil: the simulated clock, a fixed origin
	// plus steps × StepTime, deterministic.
	Clock func() time.Time
}

// Instruments selects the hook points that publish events. A hook that is
// off costs nothing: its digests, reruns and events are never computed.
type Instruments struct {
	Checksum          bool   // room.checksum on both PD sides
	Canary            bool   // canary.pages around every replay
	CanaryPolicy      string // "live" | "all" | "sweep:N"
	GraphDiff         bool   // graphdiff.sample on sampled steps
	GraphDiffEvery    int    // sample every Nth replay (plus every step of flagged sessions)
	GraphDiffTopKOnly bool   // samples carry selections only, no logit rows
	// GraphDiffVectorsEvery: a sample carries its two logit rows when its
	// sides differ at all (selections, length or any bit of a logit), and
	// otherwise on every Nth sample only; the rest carry the selections,
	// which is all the graphdiff verdict of identical rows reads. 0 or 1:
	// every sample carries its rows.
	GraphDiffVectorsEvery int
	Replay                bool // replay per step
	Sched                 bool // sched events
}

// AllInstruments turns every instrument on with the defaults sim run uses.
func AllInstruments() Instruments {
	return Instruments{Checksum: true, Canary: true, CanaryPolicy: "live", GraphDiff: true,
		GraphDiffEvery: DefaultGraphDiffEvery, GraphDiffVectorsEvery: DefaultGraphDiffVectorsEvery, Replay: true, Sched: true}
}

// DefaultGraphDiffVectorsEvery is how often a graph-vs-eager sample whose
// sides are bit-identical still carries its logit rows: one in 16 keeps a
// sampled record of the vectors while the bundle stays small (the rows are
// ~97% of a baseline run's bytes when every sample carries them).
const DefaultGraphDiffVectorsEvery = 16

// DefaultGraphDiffEvery is the default graph-vs-eager sampling period.
const DefaultGraphDiffEvery = 2

// DefaultConfig is the seeds' baseline: bf16 index-K, captured decode with
// multi-stream overlap, PD disaggregation.
func DefaultConfig() Config {
	return Config{
		IndexKDtype:          "bf16",
		CUDAGraphMaxBS:       32,
		MultiStreamOverlap:   true,
		Disaggregation:       "pd",
		MaxRunningRequests:   48,
		PoolTokens:           300000,
		Seed:                 1,
		PrefillPoolTokens:    262144,
		PrefillTokensPerStep: 16384,
		TransferPagesPerStep: 64,
		TransferChunkPages:   8,
		DecodeLogInterval:    40,
		Instruments:          AllInstruments(),
	}
}

// Validate checks c and names the first bad field.
func (c *Config) Validate() error {
	switch c.IndexKDtype {
	case "bf16", "fp8":
	default:
		return fmt.Errorf("index-k-dtype %q: want bf16 or fp8", c.IndexKDtype)
	}
	switch c.Disaggregation {
	case "pd", "none":
	default:
		return fmt.Errorf("disaggregation %q: want pd or none", c.Disaggregation)
	}
	if c.CUDAGraphMaxBS < 1 || c.CUDAGraphMaxBS > 512 {
		return fmt.Errorf("cuda-graph-max-bs %d: want 1..512", c.CUDAGraphMaxBS)
	}
	if c.MaxRunningRequests < 1 || c.MaxRunningRequests > 4096 {
		return fmt.Errorf("max-running-requests %d: want 1..4096", c.MaxRunningRequests)
	}
	if c.PoolTokens < 16*PageTokens || c.PoolTokens > 1<<26 {
		return fmt.Errorf("pool-tokens %d: want %d..%d", c.PoolTokens, 16*PageTokens, 1<<26)
	}
	for _, f := range c.Inject {
		if !slices.Contains(Faults, f) {
			return fmt.Errorf("inject %q: unknown fault (want one of %s)", f, strings.Join(Faults, ", "))
		}
	}
	if c.SpeculativeEagleTopK < 0 || c.SpeculativeEagleTopK > 16 {
		return fmt.Errorf("speculative-eagle-topk %d: want 0..16", c.SpeculativeEagleTopK)
	}
	if c.PrefillTokensPerStep < 1 || c.TransferPagesPerStep < 1 || c.TransferChunkPages < 1 || c.DecodeLogInterval < 1 {
		return fmt.Errorf("prefill/transfer/log rates must be positive")
	}
	if c.PrefillPoolTokens < ContextLen {
		return fmt.Errorf("prefill pool %d tokens: want at least %d", c.PrefillPoolTokens, ContextLen)
	}
	if c.Instruments.Canary {
		if _, err := pagediff.ParsePolicy(c.Instruments.CanaryPolicy); err != nil {
			return fmt.Errorf("canary-policy: %w", err)
		}
	}
	if c.Instruments.GraphDiff && c.Instruments.GraphDiffEvery < 1 {
		return fmt.Errorf("graphdiff-every %d: want at least 1", c.Instruments.GraphDiffEvery)
	}
	return nil
}

func (c *Config) has(fault string) bool { return slices.Contains(c.Inject, fault) }

// RunConfig maps c onto the event model's run configuration.
func (c *Config) RunConfig() hook.RunConfig {
	rc := hook.RunConfig{
		Engine:             "sim",
		Model:              "kvcanary-twin",
		IndexKDtype:        c.IndexKDtype,
		CUDAGraph:          hook.Bool(!c.DisableCUDAGraph),
		CUDAGraphMaxBS:     c.CUDAGraphMaxBS,
		MultiStreamOverlap: hook.Bool(c.MultiStreamOverlap),
		Disaggregation:     c.Disaggregation,
		MaxRunningRequests: c.MaxRunningRequests,
		PoolTokens:         c.PoolTokens,
		Seed:               c.Seed,
		StepTime:           StepTime.String(), // the engine's simulated step
		Inject:             slices.Clone(c.Inject),
	}
	if k := c.specTopK(); k >= 2 {
		rc.Extra = map[string]string{"speculative_eagle_topk": strconv.Itoa(k)}
	}
	// The twin states its own settings: every one is known, from the twin.
	rc.Provenance = map[string]string{}
	for _, k := range []string{"index_k_dtype", "cuda_graph", "cuda_graph_max_bs", "multi_stream_overlap",
		"disaggregation", "max_running_requests", "pool_tokens", "inject"} {
		rc.Provenance[k] = hook.ProvTwin
	}
	for k := range rc.Extra {
		rc.Provenance["extra."+k] = hook.ProvTwin
	}
	return rc
}

// specTopK is the draft tree's branching in effect: SpeculativeEagleTopK,
// raised to 2 by the spec-move fault (which needs moves to exist).
func (c *Config) specTopK() int {
	if c.has(FaultSpecMove) && c.SpeculativeEagleTopK < 2 {
		return 2
	}
	return c.SpeculativeEagleTopK
}

// buckets returns SGLang's capture batch sizes up to maxBS: 1, 2, 4, 8, then
// every 8.
func buckets(maxBS int) []int {
	var out []int
	for _, b := range []int{1, 2, 4} {
		if b <= maxBS {
			out = append(out, b)
		}
	}
	for b := 8; b <= maxBS; b += 8 {
		out = append(out, b)
	}
	if out[len(out)-1] != maxBS {
		out = append(out, maxBS)
	}
	return out
}
