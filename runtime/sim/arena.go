package sim

import (
	"fmt"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
)

// Arena is one worker's index-K pool: a byte arena of fixed-size pages in the
// layout's format. Page 0 is reserved as the padding page (SGLang points the
// out_cache_loc of padded graph rows at slot 0).
type Arena struct {
	L     kvlayout.Layout
	Buf   []byte
	Pages int
	// Gen counts writes per page. Every write primitive (Store, CopyPage)
	// bumps it, like a dirty bit: the canary re-digests a page only when its
	// generation moved, and re-digests everything on verification replays so
	// an untracked write could not hide.
	Gen []uint32
}

// NewArena allocates an arena of pages pages of dtype.
func NewArena(dtype string, pages int) (*Arena, error) {
	l, err := kvlayout.NewLayout(dtype)
	if err != nil {
		return nil, fmt.Errorf("new arena: %w", err)
	}
	if pages < 2 {
		return nil, fmt.Errorf("new arena: %d pages is too few", pages)
	}
	return &Arena{L: l, Buf: make([]byte, pages*l.PageBytes()), Pages: pages, Gen: make([]uint32, pages)}, nil
}

func (a *Arena) fp8() bool { return a.L.Dtype == kvlayout.DtypeFP8 }

// Store encodes key into token slot slot (page*64 + offset).
func (a *Arena) Store(slot int, key []float32) {
	page, off := slot/PageTokens, slot%PageTokens
	a.Gen[page]++
	base := page * a.L.PageBytes()
	if a.fp8() {
		k := a.Buf[base+off*HeadDim : base+(off+1)*HeadDim]
		sc := base + PageTokens*HeadDim + off*4
		encodeKeyFP8(key, k, a.Buf[sc:sc+4])
		return
	}
	encodeKeyBF16(key, a.Buf[base+off*2*HeadDim:base+(off+1)*2*HeadDim])
}

// slotSpans returns where slot off of a page lies, as byte offsets from the
// page's start: the key bytes [k0, k1) and, for fp8, the scale [s0, s1)
// (empty for bf16).
func (a *Arena) slotSpans(off int) (k0, k1, s0, s1 int) {
	if a.fp8() {
		sc := PageTokens*HeadDim + off*4
		return off * HeadDim, (off + 1) * HeadDim, sc, sc + 4
	}
	return off * 2 * HeadDim, (off + 1) * 2 * HeadDim, 0, 0
}

// appendSlot appends the bytes of token slot slot to dst: the key bytes,
// then (fp8) the scale.
func (a *Arena) appendSlot(dst []byte, slot int) []byte {
	base := slot / PageTokens * a.L.PageBytes()
	k0, k1, s0, s1 := a.slotSpans(slot % PageTokens)
	dst = append(dst, a.Buf[base+k0:base+k1]...)
	return append(dst, a.Buf[base+s0:base+s1]...)
}

// CopyPage copies one whole page from src (another arena of the same layout).
func (a *Arena) CopyPage(dst uint32, src *Arena, sp uint32) {
	pb := a.L.PageBytes()
	a.Gen[dst]++
	copy(a.Buf[int(dst)*pb:int(dst+1)*pb], src.Buf[int(sp)*pb:int(sp+1)*pb])
}

// dotGraph and dotEager score query q against the key in slot.
func (a *Arena) dot(slot int, q []float32, eager bool) float32 {
	page, off := slot/PageTokens, slot%PageTokens
	base := page * a.L.PageBytes()
	if a.fp8() {
		sc := base + PageTokens*HeadDim + off*4
		if eager {
			return dotFP8Eager(q, a.Buf[base+off*HeadDim:], a.Buf[sc:sc+4])
		}
		return dotFP8(q, a.Buf[base+off*HeadDim:], a.Buf[sc:sc+4])
	}
	if eager {
		return dotBF16Eager(q, a.Buf[base+off*2*HeadDim:])
	}
	return dotBF16Graph(q, a.Buf[base+off*2*HeadDim:])
}

// owner values of the page table.
const (
	ownerFree     = 0
	ownerReserved = -1 // page 0
)

// Allocator hands out pages of an arena and keeps the ownership table:
// page → owning request (its internal index), free, or reserved. Incoming
// transfers are owned by their request and listed in incoming.
type Allocator struct {
	owner    []int32
	incoming []bool
	free     []uint32 // LIFO stack: the most recently freed page is reused first
}

// NewAllocator manages pages 1..pages-1 (page 0 is the padding page).
func NewAllocator(pages int) *Allocator {
	a := &Allocator{owner: make([]int32, pages), incoming: make([]bool, pages)}
	a.owner[0] = ownerReserved
	for p := pages - 1; p >= 1; p-- {
		a.free = append(a.free, uint32(p))
	}
	return a
}

// FreePages is the number of free pages.
func (a *Allocator) FreePages() int { return len(a.free) }

// UsedPages is the number of allocated pages.
func (a *Allocator) UsedPages() int { return len(a.owner) - 1 - len(a.free) }

// Alloc takes n pages for owner; ok is false (and nothing is taken) when
// fewer than n are free.
func (a *Allocator) Alloc(owner int32, n int, dst []uint32) ([]uint32, bool) {
	if n > len(a.free) {
		return dst, false
	}
	for range n {
		p := a.free[len(a.free)-1]
		a.free = a.free[:len(a.free)-1]
		a.owner[p] = owner
		dst = append(dst, p)
	}
	return dst, true
}

// Free returns pages to the free list in order (the last one is reused first).
func (a *Allocator) Free(pages []uint32) {
	for _, p := range pages {
		a.owner[p] = ownerFree
		a.incoming[p] = false
		a.free = append(a.free, p)
	}
}

// Owner returns the owner index of page (0 free, -1 reserved).
func (a *Allocator) Owner(p uint32) int32 {
	if int(p) >= len(a.owner) {
		return ownerFree
	}
	return a.owner[p]
}

// MoveSlots is IndexKeyCache.move(tgt_loc, src_loc) on a paged arena, done
// right: token slot tgt[i] (page*64 + offset) receives the bytes of token
// slot src[i] — its key and, for fp8, its scale; 132 or 256 bytes. Like
// torch's buf[tgt] = buf[src], every source row is read before any target
// is written. The slots must lie inside the arena (the caller's page table
// guarantees it); scratch is reused and returned.
func (a *Arena) MoveSlots(tgt, src []int, scratch []byte) []byte {
	scratch = scratch[:0]
	for _, s := range src {
		scratch = a.appendSlot(scratch, s)
	}
	tb := a.L.TokenBytes()
	for i, t := range tgt {
		a.putSlot(t, scratch[i*tb:(i+1)*tb])
	}
	return scratch
}

// putSlot writes one token row (key bytes, then the fp8 scale) into slot.
func (a *Arena) putSlot(slot int, row []byte) {
	page := slot / PageTokens
	a.Gen[page]++
	base := page * a.L.PageBytes()
	k0, k1, s0, s1 := a.slotSpans(slot % PageTokens)
	copy(a.Buf[base+k0:base+k1], row[:k1-k0])
	copy(a.Buf[base+s0:base+s1], row[k1-k0:])
}

// OutOfBoundsError is what torch raises when an index is outside a tensor's
// dimension (IndexError on CPU; on CUDA the same check is a device-side
// assert that kills the process at the next synchronization).
type OutOfBoundsError struct {
	Index, Size int
}

func (e *OutOfBoundsError) Error() string {
	return fmt.Sprintf("IndexError: index %d is out of bounds for dimension 0 with size %d", e.Index, e.Size)
}

// MovePageRows is IndexKeyCache.move as the 2026-08 source has it: the
// token slot ids index the page-indexed (num_pages, page_bytes) buffer, so
// page row tgt[i] receives a copy of the whole page row src[i] (correct only
// for page size 1). Torch semantics: the right-hand side buf[src] is
// gathered first, and any id outside [0, Pages) — source or target — fails
// the whole statement before anything is written, returning an
// OutOfBoundsError for the first such id. It returns the page rows written
// (in call order, duplicates kept) and scratch for reuse.
func (a *Arena) MovePageRows(tgt, src []int, scratch []byte) (written []uint32, _ []byte, err error) {
	for _, ids := range [][]int{src, tgt} {
		for _, id := range ids {
			if id < 0 || id >= a.Pages {
				// Negative ids would wrap in torch; slot ids never are.
				return nil, scratch, &OutOfBoundsError{Index: id, Size: a.Pages}
			}
		}
	}
	pb := a.L.PageBytes()
	scratch = scratch[:0]
	for _, s := range src {
		scratch = append(scratch, a.Buf[s*pb:(s+1)*pb]...)
	}
	for i, t := range tgt {
		a.Gen[t]++
		copy(a.Buf[t*pb:(t+1)*pb], scratch[i*pb:(i+1)*pb])
		written = append(written, uint32(t))
	}
	return written, scratch, nil
}
