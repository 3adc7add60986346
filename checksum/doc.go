// Package checksum owns the per-room index-K digests that prove or refute
// corruption in a prefill→decode KV transfer, and judges them.
//
// SPEC.md defines the digests once, pinned by testdata/vectors.json: bsum, an
// order-free, position-mixing sum a GPU can compute in one parallel
// reduction, and xxh3, XXH3-64 of the room's token-order bytes, both over the
// bf16 and fp8 index-K layouts, plus per-page digests that locate a mismatch
// to pages and tokens; spec v1.1 (SPEC.md §9) adds digests over several
// layers' buffers, per-page bsums and the rank and stage of a digest. The Go
// code of the digests lives in the spec leaf spec/kvlayout, which sources
// (the twin, engine hooks) import instead of this analyzer.
//
// It reads room records from bundle events, kvcanary's own room_checksum log
// line and SGLang's "KV checksum mismatch" aborts, compares prefill against
// decode room by room (Compare) — several inputs, hosts, ranks and stages
// per side, every record of a room required to agree — and runs live on the
// event bus (Analyzer).
//
// Error contract: digest functions take arguments that pass Layout.Check and
// panic otherwise (a caller bug, never input). Readers never panic on input:
// unusable lines are skipped and counted with their line numbers, and a
// malformed digest on an otherwise valid line is an error naming file:line.
package checksum
