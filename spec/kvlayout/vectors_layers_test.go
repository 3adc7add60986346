package kvlayout

import (
	"bytes"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// layersVector is one entry of checksum/testdata/vectors_layers.json (SPEC.md §9.5).
type layersVector struct {
	Name       string       `json:"name"`
	Dtype      string       `json:"dtype"`
	Seed       uint64       `json:"seed"`
	NumLayers  int          `json:"num_layers"`
	Layers     []int        `json:"layers"`
	ArenaPages int          `json:"arena_pages"`
	Pages      []uint32     `json:"pages"`
	SeqLen     int          `json:"seq_len"`
	LayerBsum  []hook.Hex64 `json:"layer_bsum"`
	Bsum       hook.Hex64   `json:"bsum"`
	PageBsum   []hook.Hex64 `json:"page_bsum"`
}

// skipLayers returns 0..n-1 without the ids in skip.
func skipLayers(n int, skip ...int) []int {
	var out []int
	for l := range n {
		if !slices.Contains(skip, l) {
			out = append(out, l)
		}
	}
	return out
}

var layersVectorInputs = []layersVector{
	{Name: "bf16 three layers, three pages out of order, partial last", Dtype: "bf16", Seed: 100, NumLayers: 3, Layers: []int{0, 1, 2}, ArenaPages: 8, Pages: []uint32{6, 1, 4}, SeqLen: 150},
	{Name: "fp8 non-contiguous layers, odd seq_len", Dtype: "fp8", Seed: 200, NumLayers: 8, Layers: []int{1, 4, 7}, ArenaPages: 6, Pages: []uint32{5, 0, 3}, SeqLen: 129},
	{Name: "fp8 single layer 0, partial page", Dtype: "fp8", Seed: 300, NumLayers: 1, Layers: []int{0}, ArenaPages: 3, Pages: []uint32{2, 0}, SeqLen: 100},
	{Name: "bf16 single layer 5 of 6", Dtype: "bf16", Seed: 400, NumLayers: 6, Layers: []int{5}, ArenaPages: 2, Pages: []uint32{1}, SeqLen: 64},
	{Name: "fp8 61 layers, 3 and 10 skipped (0-row buffers), four pages descending", Dtype: "fp8", Seed: 500, NumLayers: 61, Layers: skipLayers(61, 3, 10), ArenaPages: 5, Pages: []uint32{4, 3, 2, 1}, SeqLen: 201},
	{Name: "bf16 two layers, one token", Dtype: "bf16", Seed: 600, NumLayers: 2, Layers: []int{0, 1}, ArenaPages: 2, Pages: []uint32{1}, SeqLen: 1},
	{Name: "fp8 two layers, empty room", Dtype: "fp8", Seed: 700, NumLayers: 2, Layers: []int{0, 1}, ArenaPages: 1, Pages: []uint32{0}, SeqLen: 0},
}

// layerArenas builds a case's buffers: layer id L from the §5 generator with
// seed+L, for the digested layers only.
func layerArenas(l Layout, v layersVector) []LayerArena {
	out := make([]LayerArena, len(v.Layers))
	for j, id := range v.Layers {
		out[j] = LayerArena{Layer: id, Arena: GenArena(l, v.Seed+uint64(id), v.ArenaPages)}
	}
	return out
}

func (v layersVector) vectorName() string { return v.Name }

func computeLayersVector(t *testing.T, in layersVector) layersVector {
	t.Helper()
	l := mustLayout(t, in.Dtype)
	d := RoomLayers(l, layerArenas(l, in), in.Pages, in.SeqLen, true)
	out := in
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

// refLayers is SPEC.md §9 written out literally: each layer's token-order
// stream word by word (refStream, refBsum), the layer words combined at
// their ids, each page-table entry's slice of each stream from pos 0.
func refLayers(l Layout, v layersVector) (layerBsum []uint64, bsum, x uint64, pageBsum []uint64) {
	const k = 0x9E3779B97F4A7C15
	var all []byte
	pageBsum = make([]uint64, (v.SeqLen+63)/64)
	for _, id := range v.Layers {
		s := refStream(l, GenArena(l, v.Seed+uint64(id), v.ArenaPages), v.Pages, v.SeqLen)
		all = append(all, s...)
		lb := refBsum(s)
		layerBsum = append(layerBsum, lb)
		bsum += Mix64(lb ^ uint64(id+1)*k)
		tb := l.TokenBytes()
		for i := range pageBsum {
			lo, hi := i*64*tb, min((i+1)*64, v.SeqLen)*tb
			pageBsum[i] += Mix64(refBsum(s[lo:hi]) ^ uint64(id+1)*k)
		}
	}
	return layerBsum, bsum, xxh3.Hash(all), pageBsum
}

// TestVectorsLayers checks checksum/testdata/vectors_layers.json (the Python side
// reads the same file) against the Go code and the literal reference. Run
// with -update to rewrite it after a deliberate, versioned change of SPEC §9.
func TestVectorsLayers(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range checkVectorFile(t, "vectors_layers.json", layersVectorInputs, computeLayersVector) {
		l := mustLayout(t, w.Dtype)
		lb, bsum, _, pb := refLayers(l, w)
		if len(lb) != len(w.LayerBsum) || bsum != uint64(w.Bsum) || len(pb) != len(w.PageBsum) {
			t.Errorf("vector %q: reference bsum %#x (%d layers, %d pages), committed %v (%d, %d)", w.Name, bsum, len(lb), len(pb), w.Bsum, len(w.LayerBsum), len(w.PageBsum))
			continue
		}
		for j := range lb {
			if lb[j] != uint64(w.LayerBsum[j]) {
				t.Errorf("vector %q layer %d: reference %#x, committed %v", w.Name, w.Layers[j], lb[j], w.LayerBsum[j])
			}
		}
		for i := range pb {
			if pb[i] != uint64(w.PageBsum[i]) {
				t.Errorf("vector %q page-table entry %d: reference %#x, committed %v", w.Name, i, pb[i], w.PageBsum[i])
			}
		}
		// The shape the contract promises the Python tests.
		if w.NumLayers <= w.Layers[len(w.Layers)-1] || !slices.IsSorted(w.Layers) {
			t.Errorf("vector %q: layers %v outside 0..%d or unsorted", w.Name, w.Layers, w.NumLayers-1)
		}
		seen["dtype "+w.Dtype] = true
		seen["odd fp8"] = seen["odd fp8"] || w.Dtype == DtypeFP8 && w.SeqLen%2 == 1
		seen["partial last page"] = seen["partial last page"] || w.SeqLen%64 != 0
		seen["single layer"] = seen["single layer"] || len(w.Layers) == 1
		seen["non-contiguous"] = seen["non-contiguous"] || w.Layers[len(w.Layers)-1]-w.Layers[0] != len(w.Layers)-1
		seen["3+ pages out of order"] = seen["3+ pages out of order"] || len(w.Pages) >= 3 && !slices.IsSorted(w.Pages)
	}
	for _, k := range []string{"dtype bf16", "dtype fp8", "odd fp8", "partial last page", "single layer", "non-contiguous", "3+ pages out of order"} {
		if !seen[k] {
			t.Errorf("vectors_layers.json lacks a case with %s (CONTRACT §2)", k)
		}
	}
}

// TestRoomLayersAgainstReference: xxh3 (not in the vectors: GPU hooks send
// 0, "not computed") and every field against the literal reference, and the
// digests of one layer reduce to the v1.0 ones.
func TestRoomLayersAgainstReference(t *testing.T) {
	for _, in := range layersVectorInputs {
		l := mustLayout(t, in.Dtype)
		arenas := layerArenas(l, in)
		d := RoomLayers(l, arenas, in.Pages, in.SeqLen, true)
		lb, bsum, x, pb := refLayers(l, in)
		if !slices.Equal(d.LayerBsum, lb) || d.Bsum != bsum || d.XXH3 != x || !slices.Equal(d.PageBsum, pb) || !slices.Equal(d.Layers, in.Layers) {
			t.Errorf("%s: RoomLayers %+v, reference layer_bsum %x bsum %#x xxh3 %#x page_bsum %x", in.Name, d, lb, bsum, x, pb)
		}
		for j, la := range arenas {
			if v10 := Room(l, la.Arena, in.Pages, in.SeqLen); v10.Bsum != d.LayerBsum[j] {
				t.Errorf("%s layer %d: layer_bsum %#x, v1.0 Room bsum %#x", in.Name, la.Layer, d.LayerBsum[j], v10.Bsum)
			}
		}
		if len(arenas) == 1 {
			want := RoomPageBsums(l, arenas[0].Arena, in.Pages, in.SeqLen, nil)
			for i := range want {
				want[i] = Mix64(want[i] ^ uint64(in.Layers[0]+1)*bsumK)
			}
			if !slices.Equal(d.PageBsum, want) {
				t.Errorf("%s: single-layer page_bsum %x, RoomPageBsums combined %x", in.Name, d.PageBsum, want)
			}
		}
		if d2 := RoomLayers(l, arenas, in.Pages, in.SeqLen, false); d2.PageBsum != nil || d2.Bsum != d.Bsum {
			t.Errorf("%s: without page digests %+v", in.Name, d2)
		}
	}
}

func TestRoomPageBsumsReference(t *testing.T) {
	for _, dtype := range []string{"bf16", "fp8"} {
		l := mustLayout(t, dtype)
		arena := GenArena(l, 13, 7)
		pages := []uint32{6, 2, 0, 5}
		for _, n := range []int{0, 1, 63, 64, 65, 129, 256} {
			got := RoomPageBsums(l, arena, pages, n, nil)
			s := refStream(l, arena, pages, n)
			tb := l.TokenBytes()
			var want []uint64
			for i := 0; i*64 < n; i++ {
				want = append(want, refBsum(s[i*64*tb:min((i+1)*64, n)*tb]))
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s seq_len %d: %x, reference %x", dtype, n, got, want)
			}
			// A full entry's digest is the whole-page PageBsum.
			if n >= 64 && got[0] != PageBsum(l, arena, pages[0]) {
				t.Errorf("%s: full entry %#x, PageBsum %#x", dtype, got[0], PageBsum(l, arena, pages[0]))
			}
		}
	}
}

// A corrupted byte on one layer changes that layer's digest, the room bsum
// and exactly the page_bsum entry holding the token; other layers keep
// theirs.
func TestRoomLayersLocalizesCorruption(t *testing.T) {
	l := mustLayout(t, "fp8")
	in := layersVectorInputs[1]
	arenas := layerArenas(l, in)
	before := RoomLayers(l, arenas, in.Pages, in.SeqLen, true)
	// Token 70 is slot 6 of page-table entry 1 (physical page 0); flip a
	// byte of its fp32 scale on layer 4.
	arenas[1].Arena[int(in.Pages[1])*l.PageBytes()+64*128+6*4] ^= 0x10
	after := RoomLayers(l, arenas, in.Pages, in.SeqLen, true)
	if after.Bsum == before.Bsum || after.XXH3 == before.XXH3 {
		t.Fatal("room digests unchanged")
	}
	for j := range before.Layers {
		if changed := after.LayerBsum[j] != before.LayerBsum[j]; changed != (before.Layers[j] == 4) {
			t.Errorf("layer %d changed=%v", before.Layers[j], changed)
		}
	}
	for i := range before.PageBsum {
		if changed := after.PageBsum[i] != before.PageBsum[i]; changed != (i == 1) {
			t.Errorf("page-table entry %d changed=%v", i, changed)
		}
	}
}

func TestCheckLayers(t *testing.T) {
	l := mustLayout(t, "bf16")
	a := GenArena(l, 1, 2)
	for _, c := range []struct {
		layers []LayerArena
		want   string
	}{
		{nil, "no layer buffers"},
		{[]LayerArena{{Layer: -1, Arena: a}}, "layer id -1"},
		{[]LayerArena{{Layer: 2, Arena: a}, {Layer: 2, Arena: a}}, "strictly ascending"},
		{[]LayerArena{{Layer: 0, Arena: a}, {Layer: 1, Arena: a[:l.PageBytes()]}}, "layer 1: check room: page table entry 0 is page 1, arena holds 1 pages"},
	} {
		err := l.CheckLayers(c.layers, []uint32{1}, 10)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%v: %v, want %q", len(c.layers), err, c.want)
		}
	}
}
