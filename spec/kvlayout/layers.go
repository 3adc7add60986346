package kvlayout

import (
	"fmt"

	"github.com/zeebo/xxh3"
)

// Multi-layer digests (SPEC.md §9, version 1.1). A real pool holds one
// index-K buffer per layer; a room's tokens sit in the same page-table slots
// of every layer's buffer. Each layer's token-order stream is digested as in
// §1–§2, and the per-layer digests are combined the way bsum combines words:
// layer id L's digest is the word at position L.

// LayerArena is one layer's index-K buffer.
type LayerArena struct {
	Layer int    // layer id (≥ 0), as the engine numbers its layers
	Arena []byte // that layer's pages, in the room's layout
}

// CombineLayers is the bsum of digests taken as 64-bit words at word
// positions equal to their layer ids: Σ_j Mix64(digests[j] ⊕ (layers[j]+1)·K)
// mod 2^64. It combines per-layer room bsums into the room bsum, and
// per-layer page bsums into a page_bsum entry. layers and digests are
// parallel; it panics if their lengths differ (a caller bug).
func CombineLayers(layers []int, digests []uint64) uint64 {
	if len(layers) != len(digests) {
		panic(fmt.Sprintf("kvlayout: CombineLayers: %d layers, %d digests", len(layers), len(digests)))
	}
	var s uint64
	for j, d := range digests {
		s += Mix64(d ^ (uint64(layers[j])+1)*bsumK)
	}
	return s
}

// RoomPageBsums appends one bsum per page-table entry the room's seqLen
// tokens occupy: the bsum of that entry's part of the room's token-order
// stream, word positions counted from the entry's start (pos 0). Slots at or
// past seqLen are excluded, as in RoomPages. This is a room.checksum's
// page_bsum for a single buffer (SPEC.md §9.3).
func RoomPageBsums(l Layout, arena []byte, pages []uint32, seqLen int, dst []uint64) []uint64 {
	l.mustCheck(arena, pages, seqLen)
	buf := gatherPool.Get().(*[PageTokens * (HeadDim + 4)]byte)
	for i := 0; i*l.PageTokens < seqLen; i++ {
		n := min(l.PageTokens, seqLen-i*l.PageTokens)
		dst = append(dst, BsumBytes(l.pageStream(arena, pages[i], n, buf), 0))
	}
	gatherPool.Put(buf)
	return dst
}

// LayersDigest is a room's multi-layer digest (SPEC.md §9).
type LayersDigest struct {
	Layers    []int    // layer ids, ascending
	LayerBsum []uint64 // v1.0 bsum of the room's stream on each layer
	Bsum      uint64   // CombineLayers(Layers, LayerBsum)
	XXH3      uint64   // XXH3-64 of the layers' streams concatenated in Layers order
	PageBsum  []uint64 // per page-table entry, CombineLayers of the layers' entry bsums
}

// CheckLayers reports whether layers can be digested together: at least one,
// ids ascending and ≥ 0, and each arena holding the room (Layout.Check).
func (l Layout) CheckLayers(layers []LayerArena, pages []uint32, seqLen int) error {
	if len(layers) == 0 {
		return fmt.Errorf("check layers: no layer buffers")
	}
	for j, la := range layers {
		if la.Layer < 0 {
			return fmt.Errorf("check layers: entry %d has layer id %d", j, la.Layer)
		}
		if j > 0 && la.Layer <= layers[j-1].Layer {
			return fmt.Errorf("check layers: layer %d after %d: ids must be strictly ascending", la.Layer, layers[j-1].Layer)
		}
		if err := l.Check(la.Arena, pages, seqLen); err != nil {
			return fmt.Errorf("layer %d: %w", la.Layer, err)
		}
	}
	return nil
}

// RoomLayers digests a room over several layers' buffers: the same page
// table and seqLen on every layer. With pageDigests it also fills PageBsum.
// It panics if the arguments fail CheckLayers.
func RoomLayers(l Layout, layers []LayerArena, pages []uint32, seqLen int, pageDigests bool) LayersDigest {
	if err := l.CheckLayers(layers, pages, seqLen); err != nil {
		panic("kvlayout: " + err.Error())
	}
	buf := gatherPool.Get().(*[PageTokens * (HeadDim + 4)]byte)
	h := hasherPool.Get().(*xxh3.Hasher)
	h.Reset()
	npages := (seqLen + l.PageTokens - 1) / l.PageTokens
	d := LayersDigest{Layers: make([]int, len(layers)), LayerBsum: make([]uint64, len(layers))}
	if pageDigests {
		d.PageBsum = make([]uint64, npages)
	}
	pageWords := uint64(l.PageBytes() / 8)
	for j, la := range layers {
		d.Layers[j] = la.Layer
		k := (uint64(la.Layer) + 1) * bsumK
		var sum uint64
		for i := range npages {
			n := min(l.PageTokens, seqLen-i*l.PageTokens)
			b := l.pageStream(la.Arena, pages[i], n, buf)
			sum += BsumBytes(b, uint64(i)*pageWords)
			if pageDigests {
				d.PageBsum[i] += Mix64(BsumBytes(b, 0) ^ k)
			}
			_, _ = h.Write(b)
		}
		d.LayerBsum[j] = sum
	}
	d.Bsum = CombineLayers(d.Layers, d.LayerBsum)
	d.XXH3 = h.Sum64()
	hasherPool.Put(h)
	gatherPool.Put(buf)
	return d
}
