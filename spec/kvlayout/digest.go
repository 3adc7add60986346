package kvlayout

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/zeebo/xxh3"
)

// Index-K geometry shared by every supported layout (see SPEC.md §1).
const (
	PageTokens = 64  // tokens per index-K page
	HeadDim    = 128 // index-K head dimension
)

// Supported index-K dtypes. fp4 is DeepSeek-V4's C4 indexer with
// --enable-deepseek-v4-fp4-indexer; on V4 a "token" of this package is one C4
// entry (SPEC.md §10).
const (
	DtypeBF16 = "bf16"
	DtypeFP8  = "fp8"
	DtypeFP4  = "fp4"
)

// Layout describes how one index-K page is laid out in the arena.
//
// bf16: a page is PageTokens slots of HeadDim bf16 values (256 bytes per slot).
// fp8: a page is PageTokens slots of HeadDim fp8 K bytes (128 bytes per slot),
// followed by PageTokens fp32 scales (4 bytes per slot).
// fp4: a page is PageTokens slots of HeadDim packed e2m1 values (64 bytes per
// slot), followed by PageTokens ue8m0 scale blocks (4 bytes per slot).
type Layout struct {
	Dtype      string // "bf16" | "fp8" | "fp4"
	PageTokens int    // tokens per page (64)
	HeadDim    int    // head dimension (128)
}

// NewLayout returns the layout of dtype ("bf16", "fp8" or "fp4") with
// 64-token pages and head dimension 128.
func NewLayout(dtype string) (Layout, error) {
	switch dtype {
	case DtypeBF16, DtypeFP8, DtypeFP4:
		return Layout{Dtype: dtype, PageTokens: PageTokens, HeadDim: HeadDim}, nil
	}
	return Layout{}, fmt.Errorf("new layout: unknown index-K dtype %q (want bf16, fp8 or fp4)", dtype)
}

// TokenBytes is the length of one token's token-order bytes: 256 for bf16,
// 132 for fp8 (128 K bytes then a 4-byte fp32 scale), 68 for fp4 (64 packed
// e2m1 bytes then 4 ue8m0 scale bytes).
func (l Layout) TokenBytes() int {
	switch l.Dtype {
	case DtypeFP8, DtypeFP4:
		return l.kBytes() + 4
	}
	return 2 * l.HeadDim
}

// PageBytes is the arena footprint of one page: 16384 for bf16, 8448 for fp8,
// 4352 for fp4.
func (l Layout) PageBytes() int { return l.PageTokens * l.TokenBytes() }

// fp8 reports a scaled layout (fp8 or fp4): a page holds every slot's K bytes,
// then every slot's 4 scale bytes.
func (l Layout) fp8() bool { return l.Dtype == DtypeFP8 || l.Dtype == DtypeFP4 }

// kBytes is one slot's K bytes: 64 for fp4 (two e2m1 values a byte), else
// HeadDim (fp8) or the whole slot (bf16, 2·HeadDim).
func (l Layout) kBytes() int {
	switch l.Dtype {
	case DtypeFP4:
		return l.HeadDim / 2
	case DtypeFP8:
		return l.HeadDim
	}
	return 2 * l.HeadDim
}

// Check reports whether pages and seqLen describe a room that fits arena: the
// page table covers seqLen tokens and every page lies inside the arena. The
// digest functions assume their arguments pass Check and panic otherwise.
func (l Layout) Check(arena []byte, pages []uint32, seqLen int) error {
	if l.Dtype != DtypeBF16 && l.Dtype != DtypeFP8 && l.Dtype != DtypeFP4 {
		return fmt.Errorf("check room: unknown index-K dtype %q", l.Dtype)
	}
	if l.PageTokens != PageTokens || l.HeadDim != HeadDim {
		return fmt.Errorf("check room: layout %dx%d is not the supported %dx%d", l.PageTokens, l.HeadDim, PageTokens, HeadDim)
	}
	if seqLen < 0 {
		return fmt.Errorf("check room: negative seq_len %d", seqLen)
	}
	if need := (seqLen + l.PageTokens - 1) / l.PageTokens; len(pages) < need {
		return fmt.Errorf("check room: seq_len %d needs %d pages, page table has %d", seqLen, need, len(pages))
	}
	n := uint64(len(arena) / l.PageBytes())
	for i, p := range pages {
		if uint64(p) >= n {
			return fmt.Errorf("check room: page table entry %d is page %d, arena holds %d pages", i, p, n)
		}
	}
	return nil
}

// Digest is a room's pair of digests (SPEC.md §2, §3).
type Digest struct {
	Bsum uint64
	XXH3 uint64
}

// bsum constants (SPEC.md §2).
const (
	bsumK  = 0x9E3779B97F4A7C15 // golden-ratio odd constant: position stride
	bsumK2 = uint64(bsumK * 2 % (1 << 64))
	bsumK3 = uint64(bsumK * 3 % (1 << 64))
	bsumK4 = uint64(bsumK * 4 % (1 << 64))
	bsumK5 = uint64(bsumK * 5 % (1 << 64))
	bsumK6 = uint64(bsumK * 6 % (1 << 64))
	bsumK7 = uint64(bsumK * 7 % (1 << 64))
	bsumK8 = uint64(bsumK * 8 % (1 << 64))
	mixM1  = 0xBF58476D1CE4E5B9 // splitmix64 finalizer multipliers
	mixM2  = 0x94D049BB133111EB
)

// BsumK is bsum's position stride K, the golden-ratio odd constant
// (SPEC.md §2); the layer combine and the vector generator use it too.
const BsumK uint64 = bsumK

// Mix64 is the splitmix64 finalizer used by bsum.
func Mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * mixM1
	z = (z ^ (z >> 27)) * mixM2
	return z ^ (z >> 31)
}

// BsumBytes is the bsum of a token-order byte stream b whose first word has
// word index pos in the room's stream: Σ Mix64(w_i ⊕ (pos+i+1)·K) mod 2^64
// over b's 64-bit little-endian words, a short final word zero-padded.
// bsum is additive: BsumBytes(a‖b, p) = BsumBytes(a, p) + BsumBytes(b, p+len(a)/8)
// whenever len(a) is a multiple of 8.
func BsumBytes(b []byte, pos uint64) uint64 {
	k := (pos + 1) * bsumK
	var s0, s1, s2, s3 uint64
	// Eight words per step into four independent sums: the multiplies of
	// neighbouring words overlap, and one bounds check covers the block.
	n := len(b) &^ 63
	for i := 0; i < n; i += 64 {
		c := b[i : i+64 : i+64]
		s0 += Mix64(binary.LittleEndian.Uint64(c[0:]) ^ k)
		s1 += Mix64(binary.LittleEndian.Uint64(c[8:]) ^ (k + bsumK))
		s2 += Mix64(binary.LittleEndian.Uint64(c[16:]) ^ (k + bsumK2))
		s3 += Mix64(binary.LittleEndian.Uint64(c[24:]) ^ (k + bsumK3))
		s0 += Mix64(binary.LittleEndian.Uint64(c[32:]) ^ (k + bsumK4))
		s1 += Mix64(binary.LittleEndian.Uint64(c[40:]) ^ (k + bsumK5))
		s2 += Mix64(binary.LittleEndian.Uint64(c[48:]) ^ (k + bsumK6))
		s3 += Mix64(binary.LittleEndian.Uint64(c[56:]) ^ (k + bsumK7))
		k += bsumK8
	}
	b = b[n:]
	for len(b) >= 8 {
		s0 += Mix64(binary.LittleEndian.Uint64(b) ^ k)
		k += bsumK
		b = b[8:]
	}
	if len(b) > 0 {
		var tail [8]byte
		copy(tail[:], b)
		s0 += Mix64(binary.LittleEndian.Uint64(tail[:]) ^ k)
	}
	return s0 + s1 + s2 + s3
}

// fp8 page gathers: a page's token-order bytes assembled in a pooled buffer.
var gatherPool = sync.Pool{New: func() any { return new([PageTokens * (HeadDim + 4)]byte) }}

var hasherPool = sync.Pool{New: func() any { return xxh3.New() }}

// pageStream returns the token-order bytes of the first n tokens of page p.
// For bf16 it is a subslice of arena; for fp8 the tokens are gathered into buf.
func (l Layout) pageStream(arena []byte, p uint32, n int, buf *[PageTokens * (HeadDim + 4)]byte) []byte {
	pb := l.PageBytes()
	base := int(p) * pb
	if !l.fp8() {
		return arena[base : base+n*l.TokenBytes()]
	}
	page := arena[base : base+pb]
	kb := l.kBytes()
	scales := page[l.PageTokens*kb:]
	tb := kb + 4
	for s := 0; s < n; s++ {
		dst := buf[s*tb : (s+1)*tb]
		copy(dst[:kb], page[s*kb:(s+1)*kb])
		copy(dst[kb:], scales[s*4:s*4+4])
	}
	return buf[:n*tb]
}

// TokenBytesAt returns the token-order bytes of slot s of page p: a subslice
// of arena for bf16, a fresh copy for fp8 (132 bytes) and fp4 (68).
func (l Layout) TokenBytesAt(arena []byte, p uint32, s int) []byte {
	base := int(p) * l.PageBytes()
	if !l.fp8() {
		tb := l.TokenBytes()
		return arena[base+s*tb : base+(s+1)*tb]
	}
	kb := l.kBytes()
	out := make([]byte, 0, kb+4)
	out = append(out, arena[base+s*kb:base+(s+1)*kb]...)
	sc := base + l.PageTokens*kb + s*4
	return append(out, arena[sc:sc+4]...)
}

func (l Layout) mustCheck(arena []byte, pages []uint32, seqLen int) {
	if err := l.Check(arena, pages, seqLen); err != nil {
		panic("kvlayout: " + err.Error())
	}
}

// Room digests tokens 0..seqLen-1 of a room whose page table is pages, in
// token order (page table order, then slot order). Pages past the ones seqLen
// needs are ignored. It panics if the arguments fail Layout.Check.
func Room(l Layout, arena []byte, pages []uint32, seqLen int) Digest {
	l.mustCheck(arena, pages, seqLen)
	buf := gatherPool.Get().(*[PageTokens * (HeadDim + 4)]byte)
	h := hasherPool.Get().(*xxh3.Hasher)
	h.Reset()
	var d Digest
	pageWords := uint64(l.PageBytes() / 8) // 2048 bf16, 1056 fp8, 544 fp4: pages are word-aligned
	for i := 0; i*l.PageTokens < seqLen; i++ {
		n := min(l.PageTokens, seqLen-i*l.PageTokens)
		b := l.pageStream(arena, pages[i], n, buf)
		d.Bsum += BsumBytes(b, uint64(i)*pageWords)
		_, _ = h.Write(b)
	}
	d.XXH3 = h.Sum64()
	hasherPool.Put(h)
	gatherPool.Put(buf)
	return d
}

// Page is the per-page digest: xxh3-64 of the token-order bytes of all
// PageTokens slots of page. It panics if page lies outside arena.
func Page(l Layout, arena []byte, page uint32) uint64 {
	l.mustCheck(arena, []uint32{page}, 0)
	return pageXXH3(l, arena, page, l.PageTokens)
}

// PageBsum is the bsum of the token-order bytes of all PageTokens slots of
// page, with word positions counted from the start of the page.
func PageBsum(l Layout, arena []byte, page uint32) uint64 {
	l.mustCheck(arena, []uint32{page}, 0)
	buf := gatherPool.Get().(*[PageTokens * (HeadDim + 4)]byte)
	v := BsumBytes(l.pageStream(arena, page, l.PageTokens, buf), 0)
	gatherPool.Put(buf)
	return v
}

func pageXXH3(l Layout, arena []byte, page uint32, n int) uint64 {
	if !l.fp8() {
		return xxh3.Hash(l.pageStream(arena, page, n, nil))
	}
	buf := gatherPool.Get().(*[PageTokens * (HeadDim + 4)]byte)
	v := xxh3.Hash(l.pageStream(arena, page, n, buf))
	gatherPool.Put(buf)
	return v
}

// Pages appends Page of every entry of pages to dst and returns it.
func Pages(l Layout, arena []byte, pages []uint32, dst []uint64) []uint64 {
	l.mustCheck(arena, pages, 0)
	for _, p := range pages {
		dst = append(dst, pageXXH3(l, arena, p, l.PageTokens))
	}
	return dst
}

// RoomPages appends one digest per page the room's seqLen tokens occupy:
// xxh3-64 of that page's slice of the room's token-order stream. A full page's
// entry equals Page; the last page covers only slots below seqLen, so slots the
// room never wrote do not make the two sides differ. This is what a
// room.checksum event carries as page_xxh3 (SPEC.md §4).
func RoomPages(l Layout, arena []byte, pages []uint32, seqLen int, dst []uint64) []uint64 {
	l.mustCheck(arena, pages, seqLen)
	for i := 0; i*l.PageTokens < seqLen; i++ {
		n := min(l.PageTokens, seqLen-i*l.PageTokens)
		dst = append(dst, pageXXH3(l, arena, pages[i], n))
	}
	return dst
}

// DiffTokens compares two copies of a room token by token (a's page table
// against b's, possibly in different arenas) and returns the token indices
// below seqLen whose token-order bytes differ. Both sides must pass Check.
func DiffTokens(l Layout, arenaA []byte, pagesA []uint32, arenaB []byte, pagesB []uint32, seqLen int) []int {
	l.mustCheck(arenaA, pagesA, seqLen)
	l.mustCheck(arenaB, pagesB, seqLen)
	var out []int
	for t := 0; t < seqLen; t++ {
		i, s := t/l.PageTokens, t%l.PageTokens
		if string(l.TokenBytesAt(arenaA, pagesA[i], s)) != string(l.TokenBytesAt(arenaB, pagesB[i], s)) {
			out = append(out, t)
		}
	}
	return out
}

// PageTokenRange returns the token indices [lo, hi) that page-table entry i
// of a room of seqLen tokens holds.
func (l Layout) PageTokenRange(i, seqLen int) (lo, hi int) {
	lo = i * l.PageTokens
	hi = min(lo+l.PageTokens, seqLen)
	if hi < lo {
		hi = lo
	}
	return lo, hi
}
