// Package canary judges what a CUDA graph replay did to the paged index-K
// pool. A source (the twin, an engine hook) digests the pages a pagediff.Policy
// selects before and after each replay, finds the changed ones with
// pagediff.Diff (the spec leaf spec/pagediff), and
// publishes a hook.CanaryPages observation (and, before each replay, a
// phase "between" observation comparing the previous replay's after-snapshot
// with the pages as they are now, for writers outside a replay such as
// speculative-decoding moves); this package classifies every
// changed page (expected-store, benign-transfer, free-page, held-page or
// LIVE-PAGE-OVERWRITE) and every collateral write a source found beside an
// expected store, counts expected stores that did not land, aggregates a run
// (Analyzer, Run, Summary), and parses SGLang's own "kv_canary violation:"
// log lines (ParseViolation, ScanLog). SPEC.md defines the semantics sources
// must follow.
//
// Error contract: classification never fails and never panics
// on any input (out-of-range pages are ignored, never indexed).
// ParseViolation returns errors naming the offending text and its byte
// offset; the report readers wrap them with file:line.
package canary
