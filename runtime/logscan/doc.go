// Package logscan reads LLM serving engines' server logs — SGLang scheduler
// lines and vLLM engine statistics — and turns them into typed records and
// hook.Sched events.
//
// Recognized lines (any prefix before the message is tolerated; SGLang's
// "[2025-06-01 12:00:00 TP0] " and vLLM's "INFO 06-01 12:00:00 [loggers.py:123] "
// prefixes also yield the line's timestamp):
//
//   - SGLang "Decode batch, #running-req: N, #token: N, token usage: 0.xx, …" and
//     "Prefill batch, #new-seq: N, …", in the old ("Decode batch. …") and new field
//     orders, with optional fields (speculative, hybrid SWA, PD queues) and the
//     trailing ", ";
//   - SGLang retractions: "KV cache pool is full. Retract requests. #retracted_reqs: N,
//     #new_token_ratio: a -> b" and the older "Decode out of memory happened. …";
//   - SGLang PD failures: "Prefill transfer failed for request rank=… req.rid=…
//     req.bootstrap_room=…", "Decode transfer failed for request rank=…
//     decode_req.req.rid=… decode_req.req.bootstrap_room=…" (with any "with
//     exception …" tail) and the decode side's "Context corruption detected:
//     Request <rid> (bootstrap_room=<a>) received metadata from
//     bootstrap_room=<b>. Metadata buffer index: <i>. …", counted with their
//     rooms (a failure is logged once per TP rank: the summary also counts
//     distinct rooms); decode lines' PD queue fields ("pre-allocated usage",
//     "#prealloc-req", "#transfer-req", "#retracted-req") and speculative
//     fields ("accept len", "accept rate") are summarized as peaks and
//     averages, and left out when no line carried them;
//   - SGLang's canary "kv_canary violation: …" and PD "KV checksum mismatch" lines,
//     recognized and counted with the raw line kept (the canary and checksum
//     analyzers own their details; a source never judges);
//   - vLLM's periodic "[Engine 000: ]Avg prompt throughput: … Running: N reqs,
//     Waiting: N reqs, GPU KV cache usage: x%, …" line (V0 and V1 forms) and
//     "Sequence group … is preempted by PreemptionMode.…" warnings.
//
// The scanners are hand-written (no regular expressions): the hot path of a
// decode line is a prefix check and one pass over its fields without
// allocating (BenchmarkScanDecodeLines).
//
// Entry points: Parser.Parse classifies one line; Scanner reads lines from a
// reader; ScanAll folds a whole log into a Summary (the `kvcanary logs scan
// --json` shape); Tail follows a growing file (repro --server-log) and
// publishes hook.Sched events — phase "decode"/"prefill" for batch lines and
// vLLM engine lines, phase "retract" for SGLang retractions and for vLLM
// preemptions (Record.AppendSched).
//
// Error contract: no input is fatal. Lines in unknown formats, malformed
// fields, binary garbage and over-long lines are counted (Summary.Unrecognized,
// Record.BadFields, Summary.LongLines) and scanning continues; only the
// underlying reader's errors are returned, wrapped with the input's name. Tail
// survives truncation and rotation of the file it follows. Nothing in this
// package panics on input.
package logscan
