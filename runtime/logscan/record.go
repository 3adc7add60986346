package logscan

import "github.com/kvcanary/kvcanary/runtime/hook"

// Kind says what a log line is.
type Kind uint8

// Line kinds.
const (
	KindUnrecognized       Kind = iota // a line in no format this package knows
	KindBlank                          // an empty or all-space line
	KindDecode                         // SGLang "Decode batch"
	KindPrefill                        // SGLang "Prefill batch"
	KindRetract                        // SGLang "KV cache pool is full. Retract requests." (or older "Decode out of memory happened.")
	KindCanaryViolation                // SGLang "kv_canary violation:"
	KindChecksumMismatch               // "KV checksum mismatch"
	KindEngineStats                    // vLLM periodic "Avg prompt throughput: …" engine line
	KindPreemption                     // vLLM "Sequence group … is preempted by PreemptionMode.…"
	KindTransferFailure                // SGLang PD "Prefill transfer failed for request …" / "Decode transfer failed for request …"
	KindMetadataCorruption             // SGLang PD decode "Context corruption detected: Request … received metadata from bootstrap_room=…"
	kindLimit
)

var kindNames = [kindLimit]string{
	KindUnrecognized:       "unrecognized",
	KindBlank:              "blank",
	KindDecode:             "decode",
	KindPrefill:            "prefill",
	KindRetract:            "retract",
	KindCanaryViolation:    "canary_violation",
	KindChecksumMismatch:   "checksum_mismatch",
	KindEngineStats:        "engine_stats",
	KindPreemption:         "preemption",
	KindTransferFailure:    "transfer_failure",
	KindMetadataCorruption: "metadata_corruption",
}

func (k Kind) String() string {
	if k < kindLimit {
		return kindNames[k]
	}
	return "kind?"
}

// Engine is the serving engine whose log format a line is in.
type Engine uint8

// Engines.
const (
	EngineUnknown Engine = iota
	EngineSGLang
	EngineVLLM
)

func (e Engine) String() string {
	switch e {
	case EngineSGLang:
		return "sglang"
	case EngineVLLM:
		return "vllm"
	}
	return "unknown"
}

// Field bits say which optional fields a Record holds (Record.Fields).
const (
	FieldRunningReq uint32 = 1 << iota
	FieldQueueReq
	FieldTokens
	FieldTokenUsage
	FieldCUDAGraph
	FieldGenThroughput
	FieldNewSeq
	FieldNewToken
	FieldCachedToken
	FieldPrealloc // PD queue fields: pre-allocated usage, #prealloc-req, #transfer-req, #retracted-req, #inflight-req
	FieldRetracted
	FieldNewTokenRatio
	FieldPreemptions
	FieldAcceptLen  // speculative decoding: accept len
	FieldAcceptRate // speculative decoding: accept rate
	FieldRank       // PD failure lines: rank=
	FieldRoom       // PD failure lines: the request's bootstrap_room
	FieldRid        // PD failure lines: the request id
	FieldFrom       // metadata corruption: the bootstrap_room the metadata came from
	FieldIndex      // metadata corruption: the metadata buffer index
)

// Record is one parsed log line. Scanner reuses one Record per line: copy
// what you keep. Numeric fields are zero when the line does not carry them;
// Fields says which ones it did.
type Record struct {
	Kind   Kind
	Engine Engine // the engine whose message this is; unknown for unrecognized lines
	Prefix Engine // the engine whose log prefix the line had (SGLang "[date time TP0] ", vLLM "INFO mm-dd time [file:n] ")
	Line   int64  // 1-based line number in the input
	TS     int64  // Unix ns from the line's prefix; 0 when it has none we understand

	Long      bool   // the line was longer than Options.MaxLine: only its first MaxLine bytes were parsed
	Fields    uint32 // Field* bits present
	BadFields int    // fields whose value did not parse (the line still counts)

	// Batch lines (SGLang decode/prefill, vLLM engine stats).
	RunningReq    int     // #running-req / vLLM Running
	QueueReq      int     // #queue-req / vLLM Waiting (V0 Pending)
	Tokens        int     // #token: KV pool tokens in use (max of full/SWA pools)
	TokenUsage    float64 // token usage as a fraction; vLLM GPU KV cache usage / 100
	CUDAGraph     bool    // "cuda graph: True"
	GenThroughput float64 // gen throughput (token/s) / vLLM Avg generation throughput

	// SGLang prefill.
	NewSeq          int
	NewToken        int
	CachedToken     int
	MixedRunning    int     // old "Prefill batch(mixed #running-req: N)"
	CacheHitRate    float64 // old prefill "cache hit rate: x%", as a fraction
	InputThroughput float64 // PD prefill "input throughput (token/s)"

	// SGLang PD queues (decode side: prealloc/transfer/retracted; prefill side: prealloc/inflight).
	PreallocUsage  float64
	PreallocReq    int
	TransferReq    int
	InflightReq    int
	RetractedQueue int // decode "#retracted-req": requests waiting in the retracted queue (a gauge, not events)

	// SGLang speculative decoding (decode lines).
	AcceptLen  float64 // "accept len": mean accepted tokens per verify step
	AcceptRate float64 // "accept rate": accepted / proposed draft tokens

	// SGLang PD failures (KindTransferFailure, KindMetadataCorruption).
	Side        string // transfer failure: "prefill" | "decode"
	Rank        int    // rank= of a transfer failure (the TP rank that logged it)
	Rid         string // the request id, unquoted
	Room        uint64 // the request's bootstrap_room
	FromRoom    uint64 // metadata corruption: the bootstrap_room whose metadata it received
	MetaIndex   int    // metadata corruption: the metadata buffer index both rooms used
	FailureText string // transfer failure: what follows "with exception " (the transfer engine's reason)

	// SGLang retraction.
	Retracted       int // #retracted_reqs
	NewTokensGained int
	RatioBefore     float64 // #new_token_ratio: before -> after
	RatioAfter      float64

	// vLLM.
	PromptThroughput float64
	Preemptions      int     // V1 "Preemptions: N" in the engine line (per interval); 1 for a preemption warning
	PrefixHitRate    float64 // as a fraction
	EngineIndex      int     // "Engine 003:" → 3; -1 when absent

	// Raw is the whole line for canary, checksum, preemption and PD failure
	// lines (the analyzers parse their details); empty otherwise.
	Raw string
}

func (r *Record) reset(line int64) {
	*r = Record{Line: line, EngineIndex: -1}
}

// unrecognized turns a half-parsed record into an unrecognized one, keeping
// only its position, timestamp and bad-field count.
func (r *Record) unrecognized() {
	line, ts, bad := r.Line, r.TS, r.BadFields
	r.reset(line)
	r.TS, r.BadFields = ts, bad
}

// bad counts a field whose value did not parse when b is set.
func (r *Record) bad(b bool) {
	if b {
		r.BadFields++
	}
}

// AppendSched appends the hook.Sched bodies a record stands for and returns
// the extended slice: one for a batch line (phase "decode" or "prefill"; vLLM
// engine lines are "decode"), one phase "retract" body for a retraction, and
// for vLLM — whose name for the same pool-pressure eviction is preemption — a
// "retract" body with Retracted 1 per preemption warning, or Retracted N for
// an engine line reporting "Preemptions: N" (after that line's decode body).
// Other kinds append nothing.
func (r *Record) AppendSched(dst []*hook.Sched) []*hook.Sched {
	switch r.Kind {
	case KindDecode, KindEngineStats:
		dst = append(dst, &hook.Sched{
			Phase: "decode", RunningReq: r.RunningReq, QueueReq: r.QueueReq, Tokens: r.Tokens,
			TokenUsage: r.TokenUsage, CUDAGraph: r.CUDAGraph, GenThroughput: r.GenThroughput,
		})
		if r.Kind == KindEngineStats && r.Preemptions > 0 {
			dst = append(dst, &hook.Sched{Phase: "retract", Retracted: r.Preemptions})
		}
	case KindPrefill:
		dst = append(dst, &hook.Sched{
			Phase: "prefill", RunningReq: r.RunningReq, QueueReq: r.QueueReq, Tokens: r.Tokens,
			TokenUsage: r.TokenUsage,
		})
	case KindRetract:
		dst = append(dst, &hook.Sched{Phase: "retract", Retracted: r.Retracted, NewTokenRatio: r.RatioAfter})
	case KindPreemption:
		dst = append(dst, &hook.Sched{Phase: "retract", Retracted: 1})
	}
	return dst
}
