package kvlayout

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

// refStream builds a room's token-order byte stream the slow, literal way.
func refStream(l Layout, arena []byte, pages []uint32, seqLen int) []byte {
	var s []byte
	for t := 0; t < seqLen; t++ {
		s = append(s, l.TokenBytesAt(arena, pages[t/l.PageTokens], t%l.PageTokens)...)
	}
	return s
}

// refBsum is SPEC.md §2 written word by word.
func refBsum(s []byte) uint64 {
	var sum uint64
	for i := 0; 8*i < len(s); i++ {
		var w [8]byte
		copy(w[:], s[8*i:])
		sum += Mix64(binary.LittleEndian.Uint64(w[:]) ^ uint64(i+1)*0x9E3779B97F4A7C15)
	}
	return sum
}

func refRoom(l Layout, arena []byte, pages []uint32, seqLen int) Digest {
	s := refStream(l, arena, pages, seqLen)
	return Digest{Bsum: refBsum(s), XXH3: xxh3.Hash(s)}
}

func mustLayout(t testing.TB, dtype string) Layout {
	t.Helper()
	l, err := NewLayout(dtype)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLayoutSizes(t *testing.T) {
	for _, c := range []struct {
		dtype       string
		token, page int
	}{{"bf16", 256, 16384}, {"fp8", 132, 8448}, {"fp4", 68, 4352}} {
		l := mustLayout(t, c.dtype)
		if l.TokenBytes() != c.token || l.PageBytes() != c.page || l.PageTokens != 64 || l.HeadDim != 128 {
			t.Errorf("%s: token %d page %d (%dx%d), want %d %d", c.dtype, l.TokenBytes(), l.PageBytes(), l.PageTokens, l.HeadDim, c.token, c.page)
		}
	}
	if _, err := NewLayout("fp16"); err == nil {
		t.Error("NewLayout(fp16): want an error")
	}
}

func TestMix64Known(t *testing.T) {
	// splitmix64's first output for seed 0 is 0xe220a8397b1dcdaf.
	if got := Mix64(0x9E3779B97F4A7C15); got != 0xe220a8397b1dcdaf {
		t.Fatalf("Mix64(K) = %#x, want 0xe220a8397b1dcdaf", got)
	}
}

func TestRoomMatchesReference(t *testing.T) {
	for _, dtype := range []string{"bf16", "fp8"} {
		l := mustLayout(t, dtype)
		arena := GenArena(l, 11, 9)
		pages := []uint32{8, 0, 4, 3, 6}
		for _, n := range []int{0, 1, 2, 3, 63, 64, 65, 127, 128, 200, 320} {
			if got, want := Room(l, arena, pages, n), refRoom(l, arena, pages, n); got != want {
				t.Errorf("%s seq_len %d: Room %+v, reference %+v", dtype, n, got, want)
			}
		}
	}
}

func TestBsumAdditive(t *testing.T) {
	buf := GenArena(mustLayout(t, "bf16"), 5, 1)[:1000]
	whole := BsumBytes(buf, 3)
	for _, cut := range []int{0, 8, 64, 72, 512, 992} {
		if got := BsumBytes(buf[:cut], 3) + BsumBytes(buf[cut:], 3+uint64(cut/8)); got != whole {
			t.Errorf("cut at %d: %#x, whole %#x", cut, got, whole)
		}
	}
	if got := refBsum(buf); BsumBytes(buf, 0) != got {
		t.Errorf("BsumBytes %#x, reference %#x", BsumBytes(buf, 0), got)
	}
}

func swapTokens(l Layout, arena []byte, pa uint32, sa int, pb uint32, sb int) {
	if l.Dtype == DtypeBF16 {
		a := l.TokenBytesAt(arena, pa, sa)
		b := l.TokenBytesAt(arena, pb, sb)
		tmp := slices.Clone(a)
		copy(a, b)
		copy(b, tmp)
		return
	}
	pbB := l.PageBytes()
	swap := func(oa, ob, n int) {
		for i := 0; i < n; i++ {
			arena[oa+i], arena[ob+i] = arena[ob+i], arena[oa+i]
		}
	}
	swap(int(pa)*pbB+sa*128, int(pb)*pbB+sb*128, 128)
	swap(int(pa)*pbB+64*128+sa*4, int(pb)*pbB+64*128+sb*4, 4)
}

func TestSwapTokensChangesBoth(t *testing.T) {
	for _, dtype := range []string{"bf16", "fp8"} {
		l := mustLayout(t, dtype)
		pages := []uint32{2, 0, 1}
		for _, c := range []struct{ ta, tb int }{{0, 1}, {5, 70}, {63, 64}, {10, 140}} {
			arena := GenArena(l, 21, 3)
			before := Room(l, arena, pages, 150)
			swapTokens(l, arena, pages[c.ta/64], c.ta%64, pages[c.tb/64], c.tb%64)
			after := Room(l, arena, pages, 150)
			if after.Bsum == before.Bsum || after.XXH3 == before.XXH3 {
				t.Errorf("%s swap tokens %d,%d: before %+v after %+v; want both digests to change", dtype, c.ta, c.tb, before, after)
			}
			if d := DiffTokens(l, GenArena(l, 21, 3), pages, arena, pages, 150); !slices.Equal(d, []int{c.ta, c.tb}) {
				t.Errorf("%s DiffTokens after swap = %v, want [%d %d]", dtype, d, c.ta, c.tb)
			}
		}
	}
}

// A byte sum would miss a swap; bsum must not miss a swap of equal-sum tokens.
func TestSwapEqualSumTokens(t *testing.T) {
	l := mustLayout(t, "bf16")
	arena := make([]byte, l.PageBytes())
	copy(l.TokenBytesAt(arena, 0, 0), []byte{1, 2})
	copy(l.TokenBytesAt(arena, 0, 1), []byte{2, 1})
	before := Room(l, arena, []uint32{0}, 2)
	swapTokens(l, arena, 0, 0, 0, 1)
	if after := Room(l, arena, []uint32{0}, 2); after.Bsum == before.Bsum {
		t.Fatalf("bsum unchanged by a swap: %#x", after.Bsum)
	}
}

func TestMovePagesKeepsDigests(t *testing.T) {
	for _, dtype := range []string{"bf16", "fp8"} {
		l := mustLayout(t, dtype)
		src := GenArena(l, 31, 4)
		srcPages := []uint32{3, 1, 2}
		const seqLen = 170
		want := Room(l, src, srcPages, seqLen)
		wantPages := RoomPages(l, src, srcPages, seqLen, nil)
		// Copy each page to a different slot of a different-sized arena with
		// unrelated surrounding data, as a PD transfer does.
		dst := GenArena(l, 99, 10)
		dstPages := []uint32{7, 0, 4}
		pb := l.PageBytes()
		for i := range srcPages {
			copy(dst[int(dstPages[i])*pb:(int(dstPages[i])+1)*pb], src[int(srcPages[i])*pb:(int(srcPages[i])+1)*pb])
		}
		if got := Room(l, dst, dstPages, seqLen); got != want {
			t.Errorf("%s: moved room digests %+v, want %+v", dtype, got, want)
		}
		if got := RoomPages(l, dst, dstPages, seqLen, nil); !slices.Equal(got, wantPages) {
			t.Errorf("%s: moved room page digests %x, want %x", dtype, got, wantPages)
		}
		// Only the room's tokens matter: garbage past seq_len on the last page
		// changes neither the room digests nor its page digests.
		lastSlot := seqLen % 64
		l.TokenBytesAt(dst, dstPages[2], lastSlot)[0] ^= 0xff
		if got := Room(l, dst, dstPages, seqLen); got != want {
			t.Errorf("%s: slot past seq_len changed room digests", dtype)
		}
		if got := RoomPages(l, dst, dstPages, seqLen, nil); !slices.Equal(got, wantPages) {
			t.Errorf("%s: slot past seq_len changed room page digests", dtype)
		}
	}
}

func TestFP8ScaleBytesCovered(t *testing.T) {
	l := mustLayout(t, "fp8")
	arena := GenArena(l, 41, 2)
	pages := []uint32{1, 0}
	before := Room(l, arena, pages, 100)
	pageBefore := Page(l, arena, 0)
	bsumBefore := PageBsum(l, arena, 0)
	// Slot 20 of page 0 is token 84 of the room; flip one bit of its scale.
	arena[0*l.PageBytes()+64*128+20*4+2] ^= 0x01
	after := Room(l, arena, pages, 100)
	if after.Bsum == before.Bsum || after.XXH3 == before.XXH3 {
		t.Errorf("scale flip: room digests %+v unchanged from %+v", after, before)
	}
	if Page(l, arena, 0) == pageBefore || PageBsum(l, arena, 0) == bsumBefore {
		t.Error("scale flip: page digests unchanged")
	}
	rp := RoomPages(l, arena, pages, 100, nil)
	if d := DiffTokens(l, GenArena(l, 41, 2), pages, arena, pages, 100); !slices.Equal(d, []int{84}) {
		t.Errorf("DiffTokens = %v, want [84]", d)
	}
	if len(rp) != 2 {
		t.Fatalf("RoomPages len %d, want 2", len(rp))
	}
}

func TestPagesAndRoomPages(t *testing.T) {
	for _, dtype := range []string{"bf16", "fp8"} {
		l := mustLayout(t, dtype)
		arena := GenArena(l, 51, 3)
		pages := []uint32{2, 0, 1}
		full := Pages(l, arena, pages, nil)
		room := RoomPages(l, arena, pages, 130, nil)
		if len(full) != 3 || len(room) != 3 {
			t.Fatalf("%s: %d full, %d room page digests", dtype, len(full), len(room))
		}
		if full[0] != room[0] || full[1] != room[1] || full[2] == room[2] {
			t.Errorf("%s: full pages %x vs room pages %x: want equal on full pages, differ on the partial one", dtype, full, room)
		}
		if full[1] != Page(l, arena, 0) {
			t.Errorf("%s: Pages[1] %#x != Page(0) %#x", dtype, full[1], Page(l, arena, 0))
		}
		// Page is xxh3 of the whole page's token-order stream.
		if want := xxh3.Hash(refStream(l, arena, []uint32{2}, 64)); full[0] != want {
			t.Errorf("%s: Page = %#x, xxh3 of token-order page %#x", dtype, full[0], want)
		}
		if want := refBsum(refStream(l, arena, []uint32{2}, 64)); PageBsum(l, arena, 2) != want {
			t.Errorf("%s: PageBsum = %#x, reference %#x", dtype, PageBsum(l, arena, 2), want)
		}
	}
}

func TestCheck(t *testing.T) {
	l := mustLayout(t, "bf16")
	arena := make([]byte, 2*l.PageBytes())
	for _, c := range []struct {
		pages  []uint32
		seqLen int
		ok     bool
	}{
		{[]uint32{0, 1}, 128, true},
		{[]uint32{0, 1}, 129, false},
		{[]uint32{2}, 1, false},
		{[]uint32{0}, -1, false},
		{nil, 0, true},
	} {
		if err := l.Check(arena, c.pages, c.seqLen); (err == nil) != c.ok {
			t.Errorf("Check(%v, %d) = %v, want ok=%v", c.pages, c.seqLen, err, c.ok)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Room with a page outside the arena did not panic")
		}
	}()
	Room(l, arena, []uint32{5}, 1)
}

func TestPageTokenRange(t *testing.T) {
	l := mustLayout(t, "bf16")
	for _, c := range []struct{ i, n, lo, hi int }{{0, 150, 0, 64}, {2, 150, 128, 150}, {3, 150, 192, 192}} {
		if lo, hi := l.PageTokenRange(c.i, c.n); lo != c.lo || hi != c.hi {
			t.Errorf("PageTokenRange(%d, %d) = %d,%d want %d,%d", c.i, c.n, lo, hi, c.lo, c.hi)
		}
	}
}
