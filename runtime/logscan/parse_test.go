package logscan

import (
	"strconv"
	"testing"
	"time"
)

func ts(s string) int64 {
	t, err := time.Parse("2006-01-02 15:04:05.000", s)
	if err != nil {
		panic(err)
	}
	return t.UnixNano()
}

type want struct {
	kind          Kind
	engine        Engine
	prefix        Engine
	ts            int64
	running       int
	queue         int
	tokens        int
	usage         float64
	graph         bool
	gen           float64
	newSeq        int
	newTok        int
	cached        int
	retracted     int
	ratio         [2]float64
	preempt       int
	engineIdx     int
	prealloc      float64
	transfer      int
	retractedQ    int
	bad           int
	raw           bool
	fieldsMissing uint32 // bits that must NOT be set
}

func TestParseTable(t *testing.T) {
	cases := []struct {
		name string
		line string
		want want
	}{
		// ---- SGLang decode, several versions ----
		{"sglang-new-decode", "[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 60, #token: 87282, token usage: 1.00, cuda graph: True, gen throughput (token/s): 2529.33, #queue-req: 13, ",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), running: 60, tokens: 87282, usage: 1.00, graph: true, gen: 2529.33, queue: 13, engineIdx: -1}},
		{"sglang-no-tp-tag", "[2026-09-13 16:06:06] Decode batch, #running-req: 66, #token: 84642, token usage: 0.97, cuda graph: False, gen throughput (token/s): 2574.67, #queue-req: 11",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2026-09-13 16:06:06.000"), running: 66, tokens: 84642, usage: 0.97, gen: 2574.67, queue: 11, engineIdx: -1}},
		{"sglang-old-decode-period", "[2024-11-20 08:15:42 TP3] Decode batch. #running-req: 24, #token: 30112, token usage: 0.26, gen throughput (token/s): 1290.50, #queue-req: 0",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2024-11-20 08:15:42.000"), running: 24, tokens: 30112, usage: 0.26, gen: 1290.50, engineIdx: -1, fieldsMissing: FieldCUDAGraph}},
		{"sglang-mid-decode-cuda-graph", "[2025-01-07 10:00:01 TP0] Decode batch. #running-req: 1, #token: 20, token usage: 0.00, cuda graph: True, gen throughput (token/s): 5.20, #queue-req: 0, ",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-01-07 10:00:01.000"), running: 1, tokens: 20, usage: 0, graph: true, gen: 5.20, engineIdx: -1}},
		{"sglang-dp-tags-ms", "[2025-06-01 12:00:00.250 DP1 TP2 EP2] Decode batch, #running-req: 5, #token: 9, token usage: 0.01, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0, ",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.250"), running: 5, tokens: 9, usage: 0.01, graph: true, gen: 1, engineIdx: -1}},
		{"sglang-forward-iter-spec", "[2025-06-01 12:00:00 TP0] Decode batch [1234], #running-req: 8, #token: 4000, token usage: 0.05, accept len: 2.41, accept rate: 0.60, cuda graph: True, gen throughput (token/s): 800.00, #queue-req: 0, ",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), running: 8, tokens: 4000, usage: 0.05, graph: true, gen: 800, engineIdx: -1}},
		{"sglang-pd-decode", "[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 24, #token: 52000, token usage: 0.26, pre-allocated usage: 0.04, #prealloc-req: 2, #transfer-req: 3, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 1800.12, #queue-req: 0, ",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), running: 24, tokens: 52000, usage: 0.26, prealloc: 0.04, transfer: 3, graph: true, gen: 1800.12, engineIdx: -1}},
		{"sglang-hybrid-swa", "[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 3, #full token: 900, full token usage: 0.10, #swa token: 1200, swa token usage: 0.30, cuda graph: True, gen throughput (token/s): 50.00, #queue-req: 1, ",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), running: 3, tokens: 1200, usage: 0.30, graph: true, gen: 50, queue: 1, engineIdx: -1}},
		{"sglang-cpu-graph", "[2025-06-01 12:00:00] Decode batch, #running-req: 2, #token: 10, token usage: 0.00, cpu graph: False, gen throughput (token/s): 3.50, #queue-req: 0, ",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), running: 2, tokens: 10, gen: 3.5, engineIdx: -1}},
		{"sglang-bad-value", "[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 7, #token: lots, token usage: 0.5x, cuda graph: Maybe, gen throughput (token/s): 1.0, #queue-req: 0, ",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), running: 7, gen: 1, bad: 3, engineIdx: -1}},
		{"sglang-decode-no-running", "[2025-06-01 12:00:00 TP0] Decode batch, #token: 5, token usage: 0.50",
			want{prefix: EngineSGLang, kind: KindUnrecognized, ts: ts("2025-06-01 12:00:00.000"), engineIdx: -1}},
		{"journald-prefix", "Jun 01 12:00:00 gpu7 python3[4242]: [2025-06-01 12:00:00 TP0] Decode batch, #running-req: 60, #token: 87282, token usage: 1.00, cuda graph: True, gen throughput (token/s): 2529.33, #queue-req: 13, ",
			want{kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), running: 60, tokens: 87282, usage: 1.00, graph: true, gen: 2529.33, queue: 13, engineIdx: -1}},
		{"no-prefix", "Decode batch, #running-req: 4, #token: 100, token usage: 0.02, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0, ",
			want{kind: KindDecode, engine: EngineSGLang, running: 4, tokens: 100, usage: 0.02, graph: true, gen: 10, engineIdx: -1}},
		{"crlf", "[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 4, #token: 100, token usage: 0.02, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 2, \r",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), running: 4, tokens: 100, usage: 0.02, graph: true, gen: 10, queue: 2, engineIdx: -1}},

		// ---- SGLang prefill ----
		{"sglang-new-prefill", "[2025-06-01 12:00:00 TP0] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 1024, token usage: 0.41, #running-req: 57, #queue-req: 9, ",
			want{prefix: EngineSGLang, kind: KindPrefill, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), newSeq: 3, newTok: 8192, cached: 1024, usage: 0.41, running: 57, queue: 9, engineIdx: -1}},
		{"sglang-old-prefill", "[2024-10-01 09:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 512, #cached-token: 0, cache hit rate: 0.00%, token usage: 0.01, #running-req: 0, #queue-req: 0",
			want{prefix: EngineSGLang, kind: KindPrefill, engine: EngineSGLang, ts: ts("2024-10-01 09:00:00.000"), newSeq: 1, newTok: 512, usage: 0.01, engineIdx: -1}},
		{"sglang-old-mixed-prefill", "[2024-10-01 09:00:00 TP0] Prefill batch(mixed #running-req: 12). #new-seq: 2, #new-token: 300, #cached-token: 44, cache hit rate: 12.80%, #queue-req: 1",
			want{prefix: EngineSGLang, kind: KindPrefill, engine: EngineSGLang, ts: ts("2024-10-01 09:00:00.000"), newSeq: 2, newTok: 300, cached: 44, queue: 1, engineIdx: -1}},
		{"sglang-pd-prefill", "[2025-06-01 12:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 4096, #cached-token: 0, token usage: 0.02, #running-req: 0, #queue-req: 0, #prealloc-req: 0, #inflight-req: 2, input throughput (token/s): 30321.55, ",
			want{prefix: EngineSGLang, kind: KindPrefill, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), newSeq: 1, newTok: 4096, usage: 0.02, engineIdx: -1}},
		{"sglang-pd-prefill-middle", "[2025-03-01 12:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 4096, #cached-token: 0, token usage: 0.02, #unbootstrapped-req: 0, #queue-req: 0, #transferring-req: 1, input throughput (token/s): 1000.00 ",
			want{prefix: EngineSGLang, kind: KindPrefill, engine: EngineSGLang, ts: ts("2025-03-01 12:00:00.000"), newSeq: 1, newTok: 4096, usage: 0.02, engineIdx: -1}},

		// ---- SGLang retraction ----
		{"sglang-retract", "[2025-06-01 12:00:07 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4100 -> 0.7000",
			want{prefix: EngineSGLang, kind: KindRetract, engine: EngineSGLang, ts: ts("2025-06-01 12:00:07.000"), retracted: 3, ratio: [2]float64{0.41, 0.7}, engineIdx: -1}},
		{"sglang-retract-gained", "[2026-09-13 16:06:07] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487",
			want{prefix: EngineSGLang, kind: KindRetract, engine: EngineSGLang, ts: ts("2026-09-13 16:06:07.000"), retracted: 1, ratio: [2]float64{0.098, 0.3487}, engineIdx: -1}},
		{"sglang-retract-old", "[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 2, #new_token_ratio: 0.3000 -> 0.5000",
			want{prefix: EngineSGLang, kind: KindRetract, engine: EngineSGLang, ts: ts("2025-03-07 21:49:33.000"), retracted: 2, ratio: [2]float64{0.3, 0.5}, engineIdx: -1}},
		{"sglang-retract-oldest", "[2024-07-01 00:00:00 TP0] decode out of memory happened, #retracted_reqs: 1, #new_token_ratio: 0.9998 -> 1.0000",
			want{prefix: EngineSGLang, kind: KindRetract, engine: EngineSGLang, ts: ts("2024-07-01 00:00:00.000"), retracted: 1, ratio: [2]float64{0.9998, 1}, engineIdx: -1}},
		{"journald-retract", "Jun 01 12:00:07 gpu7 python3[4242]: [2025-06-01 12:00:07 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4100 -> 0.7000",
			want{kind: KindRetract, engine: EngineSGLang, ts: ts("2025-06-01 12:00:07.000"), retracted: 3, ratio: [2]float64{0.41, 0.7}, engineIdx: -1}},

		// ---- markers kept raw ----
		{"canary", "[2025-06-01 12:00:08 TP0] kv_canary violation: launch_tag=HEAD_K_FULL fail_reason=chain_hash+position slot_idx=17 position=42 stored_token=111 expected_token=0 stored_chain_hash=0x1111111111111111 expected_aux=0x2222222222222222",
			want{prefix: EngineSGLang, kind: KindCanaryViolation, engine: EngineSGLang, ts: ts("2025-06-01 12:00:08.000"), raw: true, engineIdx: -1}},
		{"checksum", "[2025-06-01 12:00:09 TP0] Abort request 9f2c: KV checksum mismatch for bootstrap_room=1234",
			want{prefix: EngineSGLang, kind: KindChecksumMismatch, engine: EngineSGLang, ts: ts("2025-06-01 12:00:09.000"), raw: true, engineIdx: -1}},

		// ---- vLLM ----
		{"vllm-v1", "INFO 06-01 12:00:00 [loggers.py:118] Engine 000: Avg prompt throughput: 1520.3 tokens/s, Avg generation throughput: 812.4 tokens/s, Running: 48 reqs, Waiting: 3 reqs, GPU KV cache usage: 87.5%, Prefix cache hit rate: 41.2%",
			want{prefix: EngineVLLM, kind: KindEngineStats, engine: EngineVLLM, ts: ts("2025-06-01 12:00:00.000"), running: 48, queue: 3, usage: 0.875, gen: 812.4, engineIdx: 0}},
		{"vllm-v1-pid-prefix-preemptions", "(APIServer pid=2710) INFO 06-01 12:00:10 [loggers.py:123] Engine 003: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 930.1 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 4, GPU KV cache usage: 99.8%, Prefix cache hit rate: 0.0%",
			want{prefix: EngineVLLM, kind: KindEngineStats, engine: EngineVLLM, ts: ts("2025-06-01 12:00:10.000"), running: 64, queue: 12, usage: 0.998, gen: 930.1, preempt: 4, engineIdx: 3}},
		{"vllm-v1-no-engine", "INFO 03-02 07:08:09 [loggers.py:80] Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.5%, Prefix cache hit rate: 50.0%",
			want{prefix: EngineVLLM, kind: KindEngineStats, engine: EngineVLLM, ts: ts("2025-03-02 07:08:09.000"), running: 2, usage: 0.015, gen: 20, engineIdx: -1}},
		{"vllm-v0", "INFO 08-05 12:00:00 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 44.7 tokens/s, Running: 5 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 3.4%, CPU KV cache usage: 0.0%.",
			want{prefix: EngineVLLM, kind: KindEngineStats, engine: EngineVLLM, ts: ts("2025-08-05 12:00:00.000"), running: 5, queue: 2, usage: 0.034, gen: 44.7, engineIdx: -1}},
		{"vllm-aggregated-na", "INFO 06-01 12:00:00 [loggers.py:200] 4 Engines Aggregated: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 9 reqs, Waiting: 0 reqs, GPU KV cache usage: n/a, Prefix cache hit rate: n/a",
			want{prefix: EngineVLLM, kind: KindEngineStats, engine: EngineVLLM, ts: ts("2025-06-01 12:00:00.000"), running: 9, gen: 1, engineIdx: -1, fieldsMissing: FieldTokenUsage}},
		{"vllm-preempt-v0", "WARNING 05-09 00:49:33 scheduler.py:1057 Sequence group 0 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_cumulative_preemption_cnt=1",
			want{prefix: EngineVLLM, kind: KindPreemption, engine: EngineVLLM, ts: ts("2025-05-09 00:49:33.000"), preempt: 1, raw: true, engineIdx: -1}},
		{"vllm-preempt-bracket", "WARNING 05-09 00:49:33 [scheduler.py:1754] Sequence group chat-32k_2 is preempted by PreemptionMode.SWAP mode because there is not enough KV cache space. total_num_cumulative_preemption=1",
			want{prefix: EngineVLLM, kind: KindPreemption, engine: EngineVLLM, ts: ts("2025-05-09 00:49:33.000"), preempt: 1, raw: true, engineIdx: -1}},

		{"docker-vllm", "vllm-1  | INFO 06-01 12:00:00 [loggers.py:118] Engine 002: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 7 reqs, Waiting: 1 reqs, GPU KV cache usage: 50.0%, Prefix cache hit rate: 0.0%",
			want{kind: KindEngineStats, engine: EngineVLLM, ts: ts("2025-06-01 12:00:00.000"), running: 7, queue: 1, usage: 0.5, gen: 2, engineIdx: 2}},
		{"sglang-pd-retracted-queue", "[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 9, #token: 100, token usage: 0.99, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 4, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0, ",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-01 12:00:00.000"), running: 9, tokens: 100, usage: 0.99, retractedQ: 4, graph: true, gen: 10, engineIdx: -1}},
		{"sglang-date-change", "[2025-06-02 00:00:01 TP0] Decode batch, #running-req: 1, ",
			want{prefix: EngineSGLang, kind: KindDecode, engine: EngineSGLang, ts: ts("2025-06-02 00:00:01.000"), running: 1, engineIdx: -1}},

		// ---- not ours ----
		{"uvicorn", `INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK`, want{kind: KindUnrecognized, engineIdx: -1}},
		{"sglang-other", "[2025-06-01 12:00:00 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=30.12 GB", want{prefix: EngineSGLang, kind: KindUnrecognized, ts: ts("2025-06-01 12:00:00.000"), engineIdx: -1}},
		{"vllm-other", "INFO 06-01 12:00:00 [api_server.py:1000] Starting vLLM API server on http://0.0.0.0:8000", want{prefix: EngineVLLM, kind: KindUnrecognized, ts: ts("2025-06-01 12:00:00.000"), engineIdx: -1}},
		{"blank", "   \t ", want{kind: KindBlank, engineIdx: -1}},
		{"garbage", "\x00\xff\xfe[2025-13-99 99:99:99 TP0] Decode batch,", want{kind: KindUnrecognized, engineIdx: -1}},
		{"bad-bracket", "[2025-06-01 12:00:00 TP0 Decode batch, #running-req: 3", want{kind: KindDecode, engine: EngineSGLang, running: 3, engineIdx: -1}},
	}
	p := NewParser(Options{Year: 2025})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r Record
			p.Parse([]byte(c.line), 7, &r)
			w := c.want
			if r.Line != 7 {
				t.Errorf("line = %d, want 7", r.Line)
			}
			if r.Kind != w.kind {
				t.Fatalf("kind = %s, want %s", r.Kind, w.kind)
			}
			// Every field at once: the record seen through want's fields.
			got := want{kind: r.Kind, engine: r.Engine, prefix: r.Prefix, ts: r.TS,
				running: r.RunningReq, queue: r.QueueReq, tokens: r.Tokens, usage: r.TokenUsage, graph: r.CUDAGraph,
				gen: r.GenThroughput, newSeq: r.NewSeq, newTok: r.NewToken, cached: r.CachedToken,
				retracted: r.Retracted, ratio: w.ratio, preempt: r.Preemptions, engineIdx: r.EngineIndex,
				prealloc: r.PreallocUsage, transfer: r.TransferReq, retractedQ: r.RetractedQueue, bad: r.BadFields,
				raw: r.Raw != "", fieldsMissing: w.fieldsMissing}
			if w.kind == KindRetract {
				// The ratio is compared on retractions only.
				got.ratio = [2]float64{r.RatioBefore, r.RatioAfter}
			}
			if got != w {
				t.Errorf("record (ts %s, raw %q)\n got %+v\nwant %+v (ts %s)", time.Unix(0, r.TS).UTC(), r.Raw, got, w, time.Unix(0, w.ts).UTC())
			}
			if r.Fields&w.fieldsMissing != 0 {
				t.Errorf("fields %b include forbidden bits %b", r.Fields, w.fieldsMissing)
			}
		})
	}
}

func TestParseFloatMatchesStrconv(t *testing.T) {
	for _, s := range []string{"0", "0.00", "0.97", "1.00", "2529.33", "0.9998", "123456789012345", "1234567890.12345",
		"12345678901234567", "0.1234567890123456789", "1e3", "99.9", "0.1", "0.3", "5.20", "7.", ".5"} {
		want, err := strconv.ParseFloat(s, 64)
		got, ok := parseFloat([]byte(s))
		if err != nil || s == "7." || s == ".5" {
			// Forms an engine never prints are rejected or handled by strconv.
			if ok && got != want {
				t.Errorf("parseFloat(%q) = %v, want %v", s, got, want)
			}
			continue
		}
		if !ok || got != want {
			t.Errorf("parseFloat(%q) = %v, %v; want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "-", "abc", "1.2.3", "NaN", "-1", "1e400"} {
		if v, ok := parseFloat([]byte(s)); ok {
			t.Errorf("parseFloat(%q) = %v, accepted", s, v)
		}
	}
}

func TestParsePercentSingleRounding(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{{"99.9%", 0.999}, {"87.5%", 0.875}, {"0.2%", 0.002}, {"100.0%", 1}, {"3.4%.", 0.034}, {"12%", 0.12}} {
		got, ok := parsePercent([]byte(c.in))
		if !ok || got != c.want {
			t.Errorf("parsePercent(%q) = %v, %v; want %v", c.in, got, ok, c.want)
		}
	}
}

func TestVLLMYearAndLocation(t *testing.T) {
	loc := time.FixedZone("UTC+8", 8*3600)
	p := NewParser(Options{Year: 2024, Location: loc})
	var r Record
	p.Parse([]byte("INFO 02-29 23:59:59 [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%"), 1, &r)
	want := time.Date(2024, 2, 29, 23, 59, 59, 0, loc).UnixNano()
	if r.TS != want {
		t.Fatalf("ts = %v, want %v", time.Unix(0, r.TS), time.Unix(0, want))
	}
	p.Parse([]byte("[2024-02-29 23:59:59 TP0] Decode batch, #running-req: 1, "), 2, &r)
	if r.TS != want {
		t.Fatalf("sglang ts = %v, want %v", time.Unix(0, r.TS), time.Unix(0, want))
	}
}

func TestDaysFromCivil(t *testing.T) {
	for _, d := range []time.Time{
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC), time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		got := daysFromCivil(d.Year(), int(d.Month()), d.Day())
		if want := d.Unix() / 86400; got != want {
			t.Errorf("daysFromCivil(%s) = %d, want %d", d.Format("2006-01-02"), got, want)
		}
	}
}

func TestAppendSched(t *testing.T) {
	p := NewParser(Options{Year: 2025})
	var r Record
	p.Parse([]byte("[2025-06-01 12:00:07 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4100 -> 0.7000"), 1, &r)
	got := r.AppendSched(nil)
	if len(got) != 1 || got[0].Phase != "retract" || got[0].Retracted != 3 || got[0].NewTokenRatio != 0.7 {
		t.Fatalf("retract sched = %+v", got)
	}
	p.Parse([]byte("INFO 06-01 12:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 930.1 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 4, GPU KV cache usage: 99.8%, Prefix cache hit rate: 0.0%"), 2, &r)
	got = r.AppendSched(nil)
	if len(got) != 2 || got[0].Phase != "decode" || got[0].RunningReq != 64 || got[0].TokenUsage != 0.998 || got[1].Phase != "retract" || got[1].Retracted != 4 {
		t.Fatalf("vllm sched = %+v %+v", got[0], got[len(got)-1])
	}
	p.Parse([]byte("[2025-06-01 12:00:00 TP0] Load weight end."), 3, &r)
	if got := r.AppendSched(nil); len(got) != 0 {
		t.Fatalf("unrecognized line gave sched %+v", got)
	}
}
