package kvlayout

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// specDir holds SPEC.md and the test vectors this package is pinned by; they
// stay beside the checksum analyzer, where the Python side reads them too.
var specDir = filepath.Join("..", "..", "checksum")

var update = flag.Bool("update", false, "rewrite checksum/testdata/vectors.json from the generator")

// vector is one entry of checksum/testdata/vectors.json (SPEC.md §5).
type vector struct {
	Name       string       `json:"name"`
	Dtype      string       `json:"dtype"`
	Seed       uint64       `json:"seed"`
	ArenaPages int          `json:"arena_pages"`
	Pages      []uint32     `json:"pages"`
	SeqLen     int          `json:"seq_len"`
	Bsum       hook.Hex64   `json:"bsum"`
	XXH3       hook.Hex64   `json:"xxh3"`
	RoomPages  []hook.Hex64 `json:"room_page_xxh3"`
	PageXXH3   []hook.Hex64 `json:"page_xxh3"`
	PageBsum   []hook.Hex64 `json:"page_bsum"`
}

var vectorInputs = []vector{
	{Name: "bf16 three pages, partial last", Dtype: "bf16", Seed: 1, ArenaPages: 8, Pages: []uint32{5, 2, 7}, SeqLen: 150},
	{Name: "bf16 one full page", Dtype: "bf16", Seed: 2, ArenaPages: 2, Pages: []uint32{0}, SeqLen: 64},
	{Name: "bf16 one token", Dtype: "bf16", Seed: 2, ArenaPages: 2, Pages: []uint32{1}, SeqLen: 1},
	{Name: "bf16 empty room", Dtype: "bf16", Seed: 2, ArenaPages: 2, Pages: []uint32{1}, SeqLen: 0},
	{Name: "bf16 warmup seq_len 4", Dtype: "bf16", Seed: 7, ArenaPages: 4, Pages: []uint32{3}, SeqLen: 4},
	{Name: "fp8 three pages, odd seq_len", Dtype: "fp8", Seed: 3, ArenaPages: 6, Pages: []uint32{4, 1, 3}, SeqLen: 129},
	{Name: "fp8 two full pages", Dtype: "fp8", Seed: 4, ArenaPages: 3, Pages: []uint32{2, 0}, SeqLen: 128},
	{Name: "fp8 one token", Dtype: "fp8", Seed: 5, ArenaPages: 1, Pages: []uint32{0}, SeqLen: 1},
}

func (v vector) vectorName() string { return v.Name }

func computeVector(t *testing.T, in vector) vector {
	t.Helper()
	l := mustLayout(t, in.Dtype)
	arena := GenArena(l, in.Seed, in.ArenaPages)
	out := in
	d := Room(l, arena, in.Pages, in.SeqLen)
	out.Bsum, out.XXH3 = hook.Hex64(d.Bsum), hook.Hex64(d.XXH3)
	out.RoomPages, out.PageXXH3, out.PageBsum = nil, nil, nil
	for _, v := range RoomPages(l, arena, in.Pages, in.SeqLen, nil) {
		out.RoomPages = append(out.RoomPages, hook.Hex64(v))
	}
	for _, v := range Pages(l, arena, in.Pages, nil) {
		out.PageXXH3 = append(out.PageXXH3, hook.Hex64(v))
	}
	for _, p := range in.Pages {
		out.PageBsum = append(out.PageBsum, hook.Hex64(PageBsum(l, arena, p)))
	}
	return out
}

// checkVectorFile reads checksum/testdata/<file> (rewritten from inputs
// first with -update), checks it holds at least the inputs' number of
// vectors and that compute reproduces each one, and returns them for the
// caller's checks against the literal reference.
func checkVectorFile[V interface{ vectorName() string }](t *testing.T, file string, inputs []V, compute func(*testing.T, V) V) []V {
	t.Helper()
	path := filepath.Join(specDir, "testdata", file)
	if *update {
		var all []V
		for _, in := range inputs {
			all = append(all, compute(t, in))
		}
		b, err := json.MarshalIndent(all, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []V
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&want); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if len(want) < len(inputs) {
		t.Fatalf("%s holds %d vectors, want at least %d", path, len(want), len(inputs))
	}
	for _, w := range want {
		gb, _ := json.Marshal(compute(t, w))
		wb, _ := json.Marshal(w)
		if !bytes.Equal(gb, wb) {
			t.Errorf("vector %q:\n got  %s\n want %s", w.vectorName(), gb, wb)
		}
	}
	return want
}

// TestVectors checks the committed SPEC vectors. Run with -update to rewrite
// them after a deliberate, documented change of the SPEC.
func TestVectors(t *testing.T) {
	for _, w := range checkVectorFile(t, "vectors.json", vectorInputs, computeVector) {
		// The spec-literal reference must agree with the committed digests.
		l, _ := NewLayout(w.Dtype)
		ref := refRoom(l, GenArena(l, w.Seed, w.ArenaPages), w.Pages, w.SeqLen)
		if ref.Bsum != uint64(w.Bsum) || ref.XXH3 != uint64(w.XXH3) {
			t.Errorf("vector %q: reference %#x/%#x, committed %v/%v", w.Name, ref.Bsum, ref.XXH3, w.Bsum, w.XXH3)
		}
	}
}
