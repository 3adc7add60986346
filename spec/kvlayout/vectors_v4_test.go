package kvlayout

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// v4Vector is one entry of checksum/testdata/vectors_v4.json (SPEC.md §10.4):
// a DeepSeek-V4 room whose request holds Tokens tokens on 256-token KV pages
// Pages; its digest covers C4Entries(Tokens) C4 entries on the model layer ids
// C4Layers.
type v4Vector struct {
	Name       string       `json:"name"`
	Dtype      string       `json:"dtype"`
	Seed       uint64       `json:"seed"`
	NumLayers  int          `json:"num_layers"`
	C4Layers   []int        `json:"c4_layers"`
	ArenaPages int          `json:"arena_pages"`
	Pages      []uint32     `json:"pages"`
	Tokens     int          `json:"tokens"`
	SeqLen     int          `json:"seq_len"`
	LayerBsum  []hook.Hex64 `json:"layer_bsum"`
	Bsum       hook.Hex64   `json:"bsum"`
	PageBsum   []hook.Hex64 `json:"page_bsum"`
}

func (v v4Vector) vectorName() string { return v.Name }

// DeepSeek-V4-Flash's C4 layers on a PP=1 rank: even layers 2..42.
func flashC4Layers() []int {
	var out []int
	for l := 2; l <= 42; l += 2 {
		out = append(out, l)
	}
	return out
}

var v4VectorInputs = []v4Vector{
	{Name: "fp8 Flash's 21 C4 layers, two pages out of order, partial last", Dtype: "fp8", Seed: 1000, NumLayers: 43, C4Layers: flashC4Layers(), ArenaPages: 5, Pages: []uint32{3, 1}, Tokens: 300},
	{Name: "fp4 two C4 layers, tokens not a multiple of 4", Dtype: "fp4", Seed: 1100, NumLayers: 6, C4Layers: []int{2, 4}, ArenaPages: 4, Pages: []uint32{2, 0, 3}, Tokens: 771},
	{Name: "bf16 two C4 layers, one full page", Dtype: "bf16", Seed: 1200, NumLayers: 6, C4Layers: []int{2, 4}, ArenaPages: 3, Pages: []uint32{2}, Tokens: 256},
	{Name: "fp4 one C4 layer, three tokens (no C4 entry)", Dtype: "fp4", Seed: 1300, NumLayers: 3, C4Layers: []int{2}, ArenaPages: 2, Pages: []uint32{1}, Tokens: 3},
	{Name: "fp8 one C4 layer, odd C4 entry count", Dtype: "fp8", Seed: 1400, NumLayers: 4, C4Layers: []int{2}, ArenaPages: 3, Pages: []uint32{2, 1}, Tokens: 263},
}

func v4Arenas(l Layout, v v4Vector) []LayerArena {
	out := make([]LayerArena, len(v.C4Layers))
	for j, id := range v.C4Layers {
		out[j] = LayerArena{Layer: id, Arena: GenArena(l, v.Seed+uint64(id), v.ArenaPages)}
	}
	return out
}

func computeV4Vector(t *testing.T, in v4Vector) v4Vector {
	t.Helper()
	l := mustLayout(t, in.Dtype)
	out := in
	out.SeqLen = C4Entries(in.Tokens)
	d := RoomLayers(l, v4Arenas(l, in), in.Pages, out.SeqLen, true)
	out.LayerBsum, out.PageBsum = []hook.Hex64{}, []hook.Hex64{}
	for _, v := range d.LayerBsum {
		out.LayerBsum = append(out.LayerBsum, hook.Hex64(v))
	}
	for _, v := range d.PageBsum {
		out.PageBsum = append(out.PageBsum, hook.Hex64(v))
	}
	out.Bsum = hook.Hex64(d.Bsum)
	return out
}

// refC4Stream is SPEC.md §10 written out from token positions: the request's
// full-KV slot of position p is pages[p/256]·256 + p%256 (a req_to_token row);
// entry g's C4 slot is slot(4g+3)/4, its page row slot/64 and its offset
// slot%64; its bytes are K then scale (fp8, fp4) or the whole slot (bf16), read
// at the layout's byte offsets literally.
func refC4Stream(dtype string, arena []byte, pages []uint32, tokens int) []byte {
	sizes := map[string][2]int{"fp8": {128, 4}, "fp4": {64, 4}, "bf16": {256, 0}}[dtype]
	kb, sb := sizes[0], sizes[1]
	pageBytes := 64 * (kb + sb)
	var s []byte
	for g := 0; 4*g+3 < tokens; g++ {
		p := 4*g + 3
		full := uint64(pages[p/256])*256 + uint64(p%256)
		c4 := full / 4
		row, off := int(c4/64), int(c4%64)
		base := row * pageBytes
		s = append(s, arena[base+off*kb:base+(off+1)*kb]...)
		s = append(s, arena[base+64*kb+off*sb:base+64*kb+(off+1)*sb]...)
	}
	return s
}

// TestVectorsV4 checks checksum/testdata/vectors_v4.json (the Python side
// derives the C4 slots from a req_to_token row and must match it bit for bit)
// against the Go code and the literal reference. -update rewrites it after a
// deliberate, versioned change of SPEC §10.
func TestVectorsV4(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range checkVectorFile(t, "vectors_v4.json", v4VectorInputs, computeV4Vector) {
		if w.SeqLen != w.Tokens/4 {
			t.Errorf("vector %q: seq_len %d for %d tokens, want %d C4 entries", w.Name, w.SeqLen, w.Tokens, w.Tokens/4)
		}
		var bsum uint64
		pb := make([]uint64, (w.SeqLen+63)/64)
		for j, id := range w.C4Layers {
			l := mustLayout(t, w.Dtype)
			s := refC4Stream(w.Dtype, GenArena(l, w.Seed+uint64(id), w.ArenaPages), w.Pages, w.Tokens)
			lb := refBsum(s)
			if j >= len(w.LayerBsum) || lb != uint64(w.LayerBsum[j]) {
				t.Errorf("vector %q layer %d: reference %#x, committed %v", w.Name, id, lb, w.LayerBsum)
				continue
			}
			bsum += Mix64(lb ^ uint64(id+1)*BsumK)
			tb := len(s) / max(1, w.SeqLen)
			for i := range pb {
				pb[i] += Mix64(refBsum(s[i*64*tb:min((i+1)*64, w.SeqLen)*tb]) ^ uint64(id+1)*BsumK)
			}
		}
		if bsum != uint64(w.Bsum) {
			t.Errorf("vector %q: reference bsum %#x, committed %v", w.Name, bsum, w.Bsum)
		}
		if len(pb) != len(w.PageBsum) {
			t.Errorf("vector %q: %d page digests, committed %d", w.Name, len(pb), len(w.PageBsum))
		} else {
			for i := range pb {
				if pb[i] != uint64(w.PageBsum[i]) {
					t.Errorf("vector %q entry %d: reference %#x, committed %v", w.Name, i, pb[i], w.PageBsum[i])
				}
			}
		}
		seen[w.Dtype] = true
		seen["partial group"] = seen["partial group"] || w.Tokens%4 != 0
		seen["empty"] = seen["empty"] || w.SeqLen == 0
		seen["not first layers"] = seen["not first layers"] || w.C4Layers[0] > 0
	}
	for _, k := range []string{"fp8", "fp4", "bf16", "partial group", "empty", "not first layers"} {
		if !seen[k] {
			t.Errorf("vectors_v4.json lacks a case with %s", k)
		}
	}
}

// The fp4 token-order bytes are the 64 payload bytes then the 4 scale bytes
// at 64·64 + 4·slot, as SGLang's get_index_k_fp4 splits them.
func TestFP4TokenBytes(t *testing.T) {
	l := mustLayout(t, DtypeFP4)
	arena := GenArena(l, 7, 2)
	got := l.TokenBytesAt(arena, 1, 5)
	want := append(slices.Clone(arena[4352+5*64:4352+6*64]), arena[4352+4096+20:4352+4096+24]...)
	if !slices.Equal(got, want) {
		t.Fatalf("fp4 slot 5 of page 1: %x, want %x", got, want)
	}
	if binary.LittleEndian.Uint32(got[64:]) != binary.LittleEndian.Uint32(arena[4352+4096+20:]) {
		t.Fatal("scale bytes out of place")
	}
}

func TestC4Slot(t *testing.T) {
	// Entry g of a request on 256-token pages: slot P·64 + g%64, page row P.
	pages := []uint32{7, 2}
	for g := range 128 {
		p := 4*g + 3
		full := uint64(pages[p/256])*256 + uint64(p%256)
		s := C4Slot(full)
		if s/64 != uint64(pages[g/64]) || s%64 != uint64(g%64) {
			t.Fatalf("entry %d: C4 slot %d, want page %d offset %d", g, s, pages[g/64], g%64)
		}
	}
	if C4Entries(771) != 192 || C4Entries(3) != 0 || C4Entries(-1) != 0 {
		t.Fatal("C4Entries")
	}
}
