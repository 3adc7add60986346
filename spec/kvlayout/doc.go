// Package kvlayout is the index-K page layout and its digests, the spec that
// sources (the twin, engine hooks) and the checksum analyzer both compute
// exactly: Layout (bf16 and fp8, 64-token pages, head dimension 128, bytes
// per token and per page), the room digests bsum and xxh3 (Room), the
// per-page digests (Page, PageBsum, Pages, RoomPages, RoomPageBsums), the
// multi-layer digests of spec v1.1 (RoomLayers, CombineLayers) and the test
// vector generator (GenArena).
//
// It is a spec leaf: it judges nothing and imports no kvcanary package, so a
// source may import it without reaching an analyzer. "SPEC.md" in this
// package means checksum/SPEC.md, which defines these functions; the vectors
// that pin them (checksum/testdata/vectors*.json) are shared with the Python
// hooks (runtime/pyhook).
//
// Error contract: digest functions take arguments that pass Layout.Check (or
// CheckLayers) and panic otherwise — a caller bug, never input. Check and
// NewLayout return errors naming the offending value.
package kvlayout
