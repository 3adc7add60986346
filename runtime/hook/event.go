package hook

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
)

// Version is the event model version carried in every envelope ("v":1).
const Version = 1

// Kind names what an event's body holds. The numeric values are the kind byte of
// the binary wire frame and must never be renumbered; the string form is the
// "kind" field of the JSON-lines form.
type Kind uint8

// Event kinds of model v1.
const (
	KindInvalid         Kind = 0
	KindRunStart        Kind = 1  // "run.start": run configuration, tool version, host
	KindRunEnd          Kind = 2  // "run.end": wall time, step count, exit state
	KindRoomChecksum    Kind = 3  // "room.checksum": one side's digest of one room's index-K
	KindReplay          Kind = 4  // "replay": one decode step (graph replay or eager)
	KindCanaryPages     Kind = 5  // "canary.pages": pages a replay changed and their context
	KindGraphDiffSample Kind = 6  // "graphdiff.sample": graph and eager outputs of one step
	KindSession         Kind = 7  // "session": a finished session and its outcome class
	KindSched           Kind = 8  // "sched": a scheduler observation (batch, retraction)
	KindGPU             Kind = 9  // "gpu": per-device telemetry sample
	KindCUDA            Kind = 10 // "cuda": one driver API call seen by a probe
	KindFinding         Kind = 11 // "finding": an analyzer's judgement with evidence
	kindLimit           Kind = 12
)

var kindNames = [kindLimit]string{
	KindInvalid:         "",
	KindRunStart:        "run.start",
	KindRunEnd:          "run.end",
	KindRoomChecksum:    "room.checksum",
	KindReplay:          "replay",
	KindCanaryPages:     "canary.pages",
	KindGraphDiffSample: "graphdiff.sample",
	KindSession:         "session",
	KindSched:           "sched",
	KindGPU:             "gpu",
	KindCUDA:            "cuda",
	KindFinding:         "finding",
}

// Kinds lists every valid kind in numeric order.
func Kinds() []Kind {
	ks := make([]Kind, 0, kindLimit-1)
	for k := KindRunStart; k < kindLimit; k++ {
		ks = append(ks, k)
	}
	return ks
}

// Valid reports whether k is a kind of model v1.
func (k Kind) Valid() bool { return k > KindInvalid && k < kindLimit }

func (k Kind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind maps the JSON name of a kind ("room.checksum") to its Kind.
func ParseKind(s string) (Kind, error) {
	for k := KindRunStart; k < kindLimit; k++ {
		if kindNames[k] == s {
			return k, nil
		}
	}
	return KindInvalid, fmt.Errorf("unknown event kind %q", s)
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("marshal kind: invalid kind %d", k)
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// Source says where an event was observed. Producers may leave it empty; the
// collector fills it from the connection.
//
// Role and Rank place an engine process in a disaggregated (PD) deployment:
// Role is "prefill" or "decode" (Roles), empty for sources that are not an
// engine (a probe, the simulator, a script); Rank is its tensor-parallel rank
// and means something only when Role is set (a Source with a Rank and no Role
// is refused). When the collector authenticates producers with TLS client
// certificates it overwrites Node with the certificate's subject CN.
type Source struct {
	Node string `json:"node,omitempty"` // host name
	Proc string `json:"proc,omitempty"` // process name or role ("sglang-decode", "sim")
	PID  int32  `json:"pid,omitempty"`
	Role string `json:"role,omitempty"` // prefill | decode | "" (not an engine)
	Rank int32  `json:"rank,omitempty"` // TP rank; only with Role
}

// Roles lists the values Source.Role may take besides "".
var Roles = []string{"prefill", "decode"}

// Event is the v1 envelope. Body is one of the *Body types below, matching Kind.
type Event struct {
	Kind Kind
	TS   int64 // Unix time, nanoseconds
	Src  Source
	Run  string // run id; may be empty (the collector fills it)
	Body Body
}

// Body is implemented by every kind-specific body type.
type Body interface {
	Kind() Kind
}

// ---------------------------------------------------------------------------
// 64-bit identifiers and digests travel as JSON strings so jq and JavaScript
// keep every bit.

// Dec64 is a uint64 that marshals as a decimal JSON string ("room":"1234").
// It unmarshals from a decimal or 0x-hex string (or null, as 0). A JSON
// number is refused: above 2^53 it loses bits in jq and JavaScript, so a
// producer that gets away with numbers for small test ids would corrupt real
// 63-bit ids; the contract says string.
type Dec64 uint64

// MarshalJSON implements json.Marshaler.
func (d Dec64) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 22)
	b = append(b, '"')
	b = strconv.AppendUint(b, uint64(d), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Dec64) UnmarshalJSON(b []byte) error {
	v, err := parseU64JSON(b, reflect.TypeFor[Dec64]())
	*d = Dec64(v)
	return err
}

// Hex64 is a uint64 that marshals as a 0x-prefixed 16-digit hex JSON string
// ("bsum":"0x00000000deadbeef"). It unmarshals from hex or decimal strings (or
// null, as 0); a JSON number is refused, as for Dec64.
type Hex64 uint64

const hexDigits = "0123456789abcdef"

// AppendHex64 appends v as 0x followed by 16 lowercase hex digits.
func AppendHex64(b []byte, v uint64) []byte {
	b = append(b, '0', 'x')
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[(v>>uint(shift))&0xf])
	}
	return b
}

func (h Hex64) String() string { return string(AppendHex64(nil, uint64(h))) }

// MarshalJSON implements json.Marshaler.
func (h Hex64) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 20)
	b = append(b, '"')
	b = AppendHex64(b, uint64(h))
	return append(b, '"'), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (h *Hex64) UnmarshalJSON(b []byte) error {
	v, err := parseU64JSON(b, reflect.TypeFor[Hex64]())
	*h = Hex64(v)
	return err
}

// ParseU64 parses a decimal or 0x-prefixed hexadecimal unsigned 64-bit value.
func ParseU64(s string) (uint64, error) {
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		return strconv.ParseUint(s[2:], 16, 64)
	}
	return strconv.ParseUint(s, 10, 64)
}

// parseU64JSON parses a Dec64 or Hex64 (type t) JSON value. A JSON number
// yields a *json.UnmarshalTypeError, which encoding/json completes with the
// field's name and the decoders turn into a bad_value rejection.
func parseU64JSON(b []byte, t reflect.Type) (uint64, error) {
	s := string(b)
	if s == "null" {
		return 0, nil
	}
	if len(s) > 0 && (s[0] == '-' || s[0] >= '0' && s[0] <= '9') {
		return 0, &json.UnmarshalTypeError{Value: "number " + truncate(s, 40), Type: t}
	}
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := ParseU64(s)
	if err != nil {
		return 0, fmt.Errorf("parse 64-bit value %q: want decimal or 0x-hex", truncate(string(b), 40))
	}
	return v, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Float32s is a float32 vector that travels in JSON as base64 of its
// little-endian IEEE-754 bytes: exact, compact, and able to carry NaN and Inf,
// which JSON numbers cannot.
type Float32s []float32

// MarshalJSON implements json.Marshaler.
func (f Float32s) MarshalJSON() ([]byte, error) {
	raw := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(raw))+2)
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, raw)
	return append(out, '"'), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *Float32s) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = nil
		return nil
	}
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("float32 vector: want a base64 string of little-endian float32")
	}
	raw, err := base64.StdEncoding.AppendDecode(nil, b[1:len(b)-1])
	if err != nil {
		return fmt.Errorf("float32 vector: %w", err)
	}
	if len(raw)%4 != 0 {
		return fmt.Errorf("float32 vector: %d bytes is not a multiple of 4", len(raw))
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	*f = out
	return nil
}

// ---------------------------------------------------------------------------
// Bodies.

// RunConfig is the configuration of one run: the engine flags under test and
// the workload. A/B confound checks compare these field by field.
//
// Unknown is not false: a setting nobody reported is absent — "" or 0 for
// strings and counts, nil for the two booleans (JSON null or no member) —
// and Provenance says where each known setting came from.
type RunConfig struct {
	Engine         string `json:"engine,omitempty"` // "sim", "sglang", "vllm", "remote"
	Model          string `json:"model,omitempty"`
	URL            string `json:"url,omitempty"`
	IndexKDtype    string `json:"index_k_dtype,omitempty"` // "bf16" | "fp8" | "fp4"
	CUDAGraph      *bool  `json:"cuda_graph,omitempty"`    // nil: unknown
	CUDAGraphMaxBS int    `json:"cuda_graph_max_bs,omitempty"`
	// MultiStreamOverlap is SGLang's SGLANG_OPT_USE_MULTI_STREAM_OVERLAP; nil: unknown.
	MultiStreamOverlap *bool  `json:"multi_stream_overlap,omitempty"`
	Disaggregation     string `json:"disaggregation,omitempty"` // "pd" | "none"
	MaxRunningRequests int    `json:"max_running_requests,omitempty"`
	PoolTokens         int    `json:"pool_tokens,omitempty"`
	// TPSize is the engine's tensor-parallel size (SGLang's tp_size): how
	// many ranks each role runs, so a rank that never reported is known to
	// be missing. 0: unknown.
	TPSize      int    `json:"tp_size,omitempty"`
	Sessions    int    `json:"sessions,omitempty"`
	Rounds      int    `json:"rounds,omitempty"`
	Concurrency int    `json:"concurrency,omitempty"`
	Seed        uint64 `json:"seed"`
	// ToolTime is the client's tool execution time between rounds, as
	// "MIN-MAX" or one Go duration ("1.5s-6s", "0s": answered at once);
	// "" when unknown. It sets how far sessions drift apart.
	ToolTime string `json:"tool_time,omitempty"`
	// StepTime is the wall time one engine step takes on the twin ("25ms";
	// "0s": unpaced); "" for an engine that is not paced by kvcanary.
	StepTime string            `json:"step_time,omitempty"`
	Inject   []string          `json:"inject,omitempty"`
	Extra    map[string]string `json:"extra,omitempty"` // engine flags without a field
	// Provenance names where each known engine setting came from, by its
	// EngineFlagDiffs name ("cuda_graph", "extra.<key>", …): ProvServer,
	// ProvLabel, ProvTwin or ProvEngine. A setting without an entry in a config that has
	// a Provenance map was not known when the run started.
	Provenance map[string]string `json:"provenance,omitempty"`
	// ServerArgs are the settings the server reported about itself (SGLang's
	// GET /get_server_info), flattened to dotted keys, values as JSON text
	// for numbers and booleans ("32", "true") and as given for strings.
	ServerArgs map[string]string `json:"server_args,omitempty"`
}

// Where a known setting of a RunConfig came from.
const (
	ProvServer = "server" // reported by the server over HTTP
	ProvLabel  = "label"  // stated by the user (repro --label, wrap --config)
	ProvTwin   = "twin"   // the twin's own configuration
	ProvEngine = "engine" // read inside the engine's own process by its hooks (run.start of an engine producer)
)

// Bool returns a pointer to v, for RunConfig's known booleans.
func Bool(v bool) *bool { return &v }

// UnmarshalJSON implements json.Unmarshaler. Bundles written before
// settings had a provenance carried guesses: repro wrote
// cuda_graph/multi_stream_overlap false for a server it never asked (engine
// "remote"), and wrap kept an unstated boolean as extra "unknown". Both read
// as unknown here.
func (c *RunConfig) UnmarshalJSON(b []byte) error {
	type plain RunConfig
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = RunConfig(p)
	if c.Provenance == nil && c.Engine == "remote" {
		c.CUDAGraph, c.MultiStreamOverlap = nil, nil
	}
	for k, dst := range map[string]**bool{"cuda_graph": &c.CUDAGraph, "multi_stream_overlap": &c.MultiStreamOverlap} {
		if c.Extra[k] == "unknown" {
			*dst = nil
			delete(c.Extra, k)
		}
	}
	if c.Extra != nil && len(c.Extra) == 0 {
		c.Extra = nil
	}
	return nil
}

// GPUInfo describes one device of the host.
type GPUInfo struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	UUID     string `json:"uuid,omitempty"`
	MemTotal uint64 `json:"mem_total,omitempty"` // bytes
}

// HostInfo describes the machine a run executed on.
type HostInfo struct {
	Hostname string    `json:"hostname,omitempty"`
	OS       string    `json:"os,omitempty"`
	Arch     string    `json:"arch,omitempty"`
	CPUs     int       `json:"cpus,omitempty"`
	Driver   string    `json:"driver,omitempty"` // NVIDIA driver version when known
	GPUs     []GPUInfo `json:"gpus,omitempty"`
}

// RunStart opens a run. An engine process's hooks send one too: its Config
// holds the settings read inside the engine (provenance ProvEngine) and
// TPRank the process's tensor-parallel rank.
type RunStart struct {
	Tool   string    `json:"tool"` // kvcanary version
	Config RunConfig `json:"config"`
	Host   HostInfo  `json:"host"`
	// TPRank is the TP rank of the engine process that sent it; nil: not an
	// engine process, or its rank is unknown.
	TPRank *int `json:"tp_rank,omitempty"`
}

// RunEnd closes a run.
//
//hook:binary wall_ns steps dropped error |sent sent
type RunEnd struct {
	WallNS  int64  `json:"wall_ns" check:"min=0"`
	Steps   int64  `json:"steps,omitempty" check:"min=0"`
	Dropped uint64 `json:"dropped,omitempty"` // events the producer dropped
	Error   string `json:"error,omitempty"`
	// Sent is the events, other than this run.end, the producer process
	// wrote (or queued ahead of this run.end) to its collector connections,
	// all of them together, not counting those in Dropped (WIRE.md, "sent").
	// A reader holding fewer of this producer's (src.node, src.pid) events
	// lost the difference. 0: not known (a producer built before it).
	Sent uint64 `json:"sent,omitempty"`
}

// Side is the PD role that computed a room checksum.
type Side string

// Checksum sides.
const (
	SidePrefill Side = "prefill"
	SideDecode  Side = "decode"
)

// RoomChecksum is one side's digest of one room's index-K, in token order.
//
//hook:binary room side seq_len pages bsum xxh3 dtype request page_xxh3 |checksum-spec-v1.1 rank stage layers layer_bsum page_bsum
//hook:fastjson slab
//hook:values `layers` strictly ascending, each ≥ 0; `layer_bsum` as long as `layers` (both absent, or parallel); `page_bsum`, when present, has exactly ⌈`seq_len`/64⌉ entries (one per page-table entry the room's tokens occupy, checksum/SPEC.md §4, §9)
type RoomChecksum struct {
	Room    Dec64   `json:"room"` // bootstrap_room
	Side    Side    `json:"side" check:"oneof=prefill|decode"`
	SeqLen  int     `json:"seq_len" check:"min=0"`
	Pages   int     `json:"pages" check:"min=0"`
	Bsum    Hex64   `json:"bsum"`
	XXH3    Hex64   `json:"xxh3"`
	Dtype   string  `json:"dtype,omitempty"`   // "bf16" | "fp8"
	Request string  `json:"request,omitempty"` // engine request id
	PageSum []Hex64 `json:"page_xxh3,omitempty"`
	// Rank is the attention-TP rank that computed the digest. Index-K is
	// replicated across those ranks, so every rank of both sides must agree;
	// records of different ranks are never duplicates of each other. 0 for a
	// single-rank producer.
	Rank int `json:"rank,omitempty" check:"min=0"`
	// Stage says where on its side the digest was taken: "" (unstated),
	// "sent" (prefill, after the last chunk was handed to the transfer),
	// "transferred" (decode, as the bytes landed), "admitted" (decode, just
	// before the request's first decode step). checksum/SPEC.md §9.
	Stage string `json:"stage,omitempty" check:"oneof=|sent|transferred|admitted"`
	// Layers lists the layer ids digested, in the order of LayerBsum. Empty
	// for a single index-K buffer (spec v1.0). With layers, Bsum is the bsum
	// of the layer digests as words at positions Layers[i] (SPEC §9).
	Layers    []int   `json:"layers,omitempty"`
	LayerBsum []Hex64 `json:"layer_bsum,omitempty"`
	// PageBsum is one bsum per page-table entry of the room's token-order
	// stream (positions from the entry's start), combined over Layers like
	// Bsum. It localizes a mismatch when PageSum (page_xxh3) is absent, as
	// from an engine hook that computes bsum on the GPU only.
	PageBsum []Hex64 `json:"page_bsum,omitempty"`
}

// Replay is one decode step.
//
//hook:binary step bs bucket mode dur_ns
//hook:fastjson slab
type Replay struct {
	Step      uint64 `json:"step"`
	BatchSize int    `json:"bs" check:"min=0"`
	Bucket    int    `json:"bucket,omitempty" check:"min=0"` // captured graph batch bucket; 0 when eager
	Mode      string `json:"mode" check:"oneof=graph|eager"`
	DurNS     int64  `json:"dur_ns" check:"min=0"`
}

// PageChange is one index-K page whose digest changed across a replay.
type PageChange struct {
	Page   uint32 `json:"page"`
	Owner  string `json:"owner,omitempty"` // request id owning the page; empty when free
	Before Hex64  `json:"before"`
	After  Hex64  `json:"after"`
}

// CanaryPages is what one replay did to the index-K pool: the pages it changed
// and what the canary analyzer needs to judge them.
//
//hook:binary step policy pages_total pages_checked changed expected transfer running padding expected_owner live_pages live_checked collateral rewritten slot_checked | phase
//hook:values `expected_owner` is empty or as long as `expected` (it is parallel to it)
type CanaryPages struct {
	Step         uint64       `json:"step"`
	Policy       string       `json:"policy,omitempty"` // "live" | "all" | "sweep:N"
	PagesTotal   int          `json:"pages_total" check:"min=0"`
	PagesChecked int          `json:"pages_checked" check:"min=0"`
	Changed      []PageChange `json:"changed,omitempty"`
	Expected     []uint32     `json:"expected,omitempty"` // pages holding this step's out_loc stores
	Transfer     []uint32     `json:"transfer,omitempty"` // pages receiving an in-flight transfer
	Running      []string     `json:"running,omitempty"`  // request ids running in this batch
	// Padding lists pages written by the padded rows of a graph bucket (bs <
	// bucket): SGLang points every padded row's out_cache_loc at slot 0, so this
	// is [0] when the replay was padded. A padding page that changed is an
	// expected store; one that did not change is never a missing store.
	Padding []uint32 `json:"padding,omitempty"`
	// ExpectedOwner, when set, is parallel to Expected: the request whose store
	// lands on Expected[i]. It names the request in missing-store findings.
	ExpectedOwner []string `json:"expected_owner,omitempty"`
	// LivePages is the number of pages owned by running requests at this replay;
	// LiveChecked is how many of them were digested. Their ratio is the live
	// coverage the canary report states (100% under every built-in policy).
	LivePages   int `json:"live_pages,omitempty" check:"min=0"`
	LiveChecked int `json:"live_checked,omitempty" check:"min=0"`
	// Collateral lists expected pages on which bytes outside this step's
	// stored slots changed (the source compares those pages slot by slot, a
	// copy from before the replay against the page after; Before/After are the
	// whole-page digests). A page digest cannot tell a stray write beside an
	// expected store from the store itself; these entries can, and the canary
	// judges them as if the page were not expected.
	Collateral []PageChange `json:"collateral,omitempty"`
	// SlotChecked says the source compared every expected page slot by slot,
	// so Collateral and Rewritten are complete for this replay (an empty list
	// means none, not unknown).
	SlotChecked bool `json:"slot_checked,omitempty"`
	// Rewritten lists expected pages that did not change because each store
	// on them wrote exactly the bytes its slot already held (only a source
	// that knows the stored bytes, like the twin, can tell). They are not
	// missing stores.
	Rewritten []uint32 `json:"rewritten,omitempty"`
	// Phase is what the before/after digests bracket: "" or "replay" (one
	// decode step, as above), or "between" (from the previous check's
	// after-snapshot to this step's before-snapshot: writers outside a graph
	// replay, such as speculative-decoding moves, PD transfers landing and
	// host restores). canary/SPEC.md §7.
	Phase string `json:"phase,omitempty" check:"oneof=|replay|between"`
}

// GraphDiffSample holds what the captured replay and an eager rerun computed
// from the same inputs for one request at one step.
//
// Graph, Eager and Ref have one entry per cached position (index logits) or per
// vocabulary entry, all the same length; a position a side masked out is -Inf.
// TopKGraph and TopKEager are the positions each side actually selected (the
// selection the step used), best first; with --graphdiff-topk-only they are
// all a sample carries. K is the selection budget (the indexer's top-k) and
// SeqLen the request's cached length at this step (positions 0..SeqLen-1), so a
// judge can tell "missing the newest positions" from any other difference.
//
//hook:binary step request session dtype graph eager ref topk_graph topk_eager k seq_len | source
//hook:values `source` is empty, `next_token_logits`, or `indexer_topk.L` with `L` a layer id in plain decimal (`0`, `17`; no sign, no leading zero, below 2^31)
type GraphDiffSample struct {
	Step      uint64   `json:"step"`
	Request   string   `json:"request"`
	Session   string   `json:"session,omitempty"`
	Dtype     string   `json:"dtype,omitempty"` // dtype of the logits' producer: "fp32" | "bf16" | "fp16" | "fp8"
	Graph     Float32s `json:"graph,omitempty"` // logits of the captured replay
	Eager     Float32s `json:"eager,omitempty"` // logits of the eager rerun
	Ref       Float32s `json:"ref,omitempty"`   // optional float64-accumulated reference, rounded to float32
	TopKGraph []int32  `json:"topk_graph,omitempty"`
	TopKEager []int32  `json:"topk_eager,omitempty"`
	K         int      `json:"k,omitempty" check:"min=0"`       // selection budget; 0: len(TopKEager), else graphdiff's default
	SeqLen    int      `json:"seq_len,omitempty" check:"min=0"` // cached positions of the request at this step
	// Source names what the vectors are: "" (index logits over cached
	// positions, as the twin emits), "next_token_logits" (vocabulary logits
	// of the step), or "indexer_topk.L" (the sparse indexer's selections at
	// layer id L; TopK* only).
	Source string `json:"source,omitempty"`
}

// Session outcome classes.
const (
	OutcomeDone      = "done"
	OutcomeMaxRounds = "maxrounds"
	OutcomeLeak      = "leak"
	OutcomeNoTool    = "no_tool"
	OutcomeError     = "error"
	OutcomeTimeout   = "timeout"
)

// Outcomes lists the session outcome classes in report order.
var Outcomes = []string{OutcomeDone, OutcomeMaxRounds, OutcomeLeak, OutcomeNoTool, OutcomeError, OutcomeTimeout}

// MaxExcerpt bounds Session.Excerpt in bytes, truncation mark included.
const MaxExcerpt = 2048

// Session is a finished session.
//
//hook:binary id outcome rounds reason finish_reasons loop deviated requests | round excerpt
//hook:fastjson
type Session struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome" check:"oneof=done|maxrounds|leak|no_tool|error|timeout"`
	Rounds  int    `json:"rounds" check:"min=0"`
	// Reason says why the session ended as it did ("tool-call markup
	// <tool_call> in content", "HTTP 503: …"); repro --json names it the
	// same. Bundles from before it was named "reason" carry it as "error":
	// both decode into Reason.
	Reason        string   `json:"reason,omitempty" jsonalias:"error"`
	FinishReasons []string `json:"finish_reasons,omitempty"`
	Loop          bool     `json:"loop,omitempty"`     // an n-gram loop was seen in the output
	Deviated      bool     `json:"deviated,omitempty"` // ground truth from the twin: output left the script
	Requests      []string `json:"requests,omitempty"` // engine request ids of the session's rounds
	// Round is the round (1-based) that went wrong: the reply judged leak
	// or no_tool, or the request that failed; 0 when none did or it is
	// unknown. Requests[Round-1] is that reply's request id when it has one.
	Round int `json:"round,omitempty" check:"min=0"`
	// Excerpt is the reply text that ended a corrupted session, at most
	// MaxExcerpt bytes (a cut one ends with "… [N bytes in all]"), or, in a
	// redacted bundle, "redacted: N bytes, sha256 HEX".
	Excerpt string `json:"excerpt,omitempty" check:"maxlen=MaxExcerpt"`
}

// UnmarshalJSON implements json.Unmarshaler: Session's fields, plus the
// "error" key of older producers read as Reason ("reason" wins if both).
func (b *Session) UnmarshalJSON(data []byte) error {
	type plain Session
	var v struct {
		plain
		Legacy *string `json:"error"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*b = Session(v.plain)
	if b.Reason == "" && v.Legacy != nil {
		b.Reason = *v.Legacy
	}
	return nil
}

// Sched is a scheduler observation: a batch line or a retraction.
//
//hook:binary phase running_req queue_req tokens token_usage retracted new_token_ratio cuda_graph gen_throughput
//hook:fastjson slab
type Sched struct {
	Phase         string  `json:"phase,omitempty"` // "decode" | "prefill" | "retract"
	RunningReq    int     `json:"running_req" check:"min=0"`
	QueueReq      int     `json:"queue_req" check:"min=0"`
	Tokens        int     `json:"tokens" check:"min=0"`
	TokenUsage    float64 `json:"token_usage"`
	Retracted     int     `json:"retracted,omitempty" check:"min=0"`
	NewTokenRatio float64 `json:"new_token_ratio,omitempty"`
	CUDAGraph     bool    `json:"cuda_graph"`
	GenThroughput float64 `json:"gen_throughput,omitempty"`
}

// GPUDevice is one device's telemetry sample.
type GPUDevice struct {
	Index        int       `json:"index"`
	UUID         string    `json:"uuid,omitempty"`
	MemUsed      uint64    `json:"mem_used"`
	MemTotal     uint64    `json:"mem_total"`
	UtilGPU      uint32    `json:"util_gpu"` // percent
	UtilMem      uint32    `json:"util_mem"` // percent
	TempC        uint32    `json:"temp_c"`
	PowerMW      uint32    `json:"power_mw,omitempty"`
	SMClockMHz   uint32    `json:"sm_clock_mhz,omitempty"`
	ECCSBE       uint64    `json:"ecc_sbe,omitempty"` // volatile single-bit
	ECCDBE       uint64    `json:"ecc_dbe,omitempty"` // volatile double-bit
	PCIeReplay   uint64    `json:"pcie_replay,omitempty"`
	RetiredPages uint64    `json:"retired_pages,omitempty"`
	Xid          uint64    `json:"xid,omitempty"` // last Xid seen on this device, 0 when none
	Name         string    `json:"name,omitempty"`
	MemClockMHz  uint32    `json:"mem_clock_mhz,omitempty"`
	RemappedCorr uint64    `json:"remapped_corr,omitempty"` // rows remapped for correctable errors
	RemappedUnc  uint64    `json:"remapped_unc,omitempty"`  // rows remapped for uncorrectable errors
	RemapPending bool      `json:"remap_pending,omitempty"` // a remap waits for a GPU reset
	Procs        []GPUProc `json:"procs,omitempty"`         // compute processes and their device memory
}

// GPUProc is one process running on a device.
type GPUProc struct {
	PID     uint32 `json:"pid"`
	MemUsed uint64 `json:"mem_used"` // bytes of device memory
}

// GPU is a telemetry sample of every device.
type GPU struct {
	Devices []GPUDevice `json:"devices"`
	Driver  string      `json:"driver,omitempty"` // NVIDIA driver version
	CUDA    int         `json:"cuda,omitempty"`   // CUDA driver API version, e.g. 12040
}

// CUDA is one driver API call seen by the eBPF probe.
//
//hook:binary call pid tid stream graph_exec arg start_ns end_ns ret bytes
//hook:fastjson slab
type CUDA struct {
	Call      string `json:"call"` // resolved symbol, e.g. "cuGraphLaunch"
	PID       uint32 `json:"pid"`
	TID       uint32 `json:"tid"`
	Stream    Hex64  `json:"stream,omitempty"`
	GraphExec Hex64  `json:"graph_exec,omitempty"`
	Arg       Hex64  `json:"arg,omitempty"` // call-specific: event, graph, device pointer
	StartNS   int64  `json:"start_ns"`
	EndNS     int64  `json:"end_ns,omitempty"` // 0 when no return was seen
	Ret       int32  `json:"ret,omitempty"`    // CUresult
	Bytes     uint64 `json:"bytes,omitempty"`  // size of an allocation or copy
}

// Severity grades a finding.
type Severity string

// Severities, least to most severe.
const (
	SevInfo  Severity = "info"
	SevWarn  Severity = "warn"
	SevError Severity = "error" // evidence of corruption
)

// Finding is an analyzer's judgement with the evidence behind it.
//
//hook:binary analyzer severity summary evidence
type Finding struct {
	Analyzer string            `json:"analyzer"`
	Severity Severity          `json:"severity" check:"oneof=info|warn|error"`
	Summary  string            `json:"summary"`
	Evidence map[string]string `json:"evidence,omitempty"`
}

// Kind implementations.
func (*RunStart) Kind() Kind        { return KindRunStart }
func (*RunEnd) Kind() Kind          { return KindRunEnd }
func (*RoomChecksum) Kind() Kind    { return KindRoomChecksum }
func (*Replay) Kind() Kind          { return KindReplay }
func (*CanaryPages) Kind() Kind     { return KindCanaryPages }
func (*GraphDiffSample) Kind() Kind { return KindGraphDiffSample }
func (*Session) Kind() Kind         { return KindSession }
func (*Sched) Kind() Kind           { return KindSched }
func (*GPU) Kind() Kind             { return KindGPU }
func (*CUDA) Kind() Kind            { return KindCUDA }
func (*Finding) Kind() Kind         { return KindFinding }

// ---------------------------------------------------------------------------
// JSON-lines form.

// envelope is the JSON shape of an Event.
type envelope struct {
	V    int             `json:"v"`
	Kind string          `json:"kind"`
	TS   int64           `json:"ts_ns"`
	Src  *Source         `json:"src,omitempty"`
	Run  string          `json:"run,omitempty"`
	Body json.RawMessage `json:"body"`
}

// MarshalJSON encodes e in the JSON-lines form (without the trailing
// newline). It refuses what Validate refuses, so every line it writes reads.
func (e Event) MarshalJSON() ([]byte, error) { return AppendJSON(nil, e) }

// UnmarshalJSON decodes one JSON-lines event. It accepts exactly what
// DecodeJSONLine accepts: it rejects unknown versions and kinds, a missing
// body, bodies that do not fit their kind, values the event model forbids
// (see Validate), repeated member names and invalid UTF-8.
func (e *Event) UnmarshalJSON(b []byte) error {
	ev, _, err := decodeJSONLine(b, nil)
	if err != nil {
		return err
	}
	*e = ev
	return nil
}
