package graphdiff

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// floatsFrom reads little-endian float32s (any bit pattern: NaN payloads,
// infinities, subnormals) from b.
func floatsFrom(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// FuzzCompareSample: any vectors, selections, k and dtype are judged without
// panicking, the result always encodes as JSON, and a sample compared with
// itself never diverges.
func FuzzCompareSample(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64}, []byte{0, 0, 128, 63, 0, 0, 64, 64}, []byte{1, 0, 0, 0}, 1, "bf16")
	f.Add([]byte{0, 0, 192, 127, 0, 0, 128, 255}, []byte{0, 0, 128, 127, 0, 0, 0, 0}, []byte{}, 2, "fp32")
	f.Add([]byte{}, []byte{1, 2, 3, 4}, []byte{255, 255, 255, 255}, -3, "")
	f.Fuzz(func(t *testing.T, gb, eb, sel []byte, k int, dtype string) {
		g, e := floatsFrom(gb), floatsFrom(eb)
		var sg, se []int32
		for i := 0; i+4 <= len(sel); i += 4 {
			p := int32(binary.LittleEndian.Uint32(sel[i:]))
			if i%8 == 0 {
				sg = append(sg, p)
			} else {
				se = append(se, p)
			}
		}
		var c Comparer
		s := &hook.GraphDiffSample{Graph: g, Eager: e, TopKGraph: sg, TopKEager: se, K: k % 5000, Dtype: dtype}
		r := c.CompareSample(s, Options{})
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("result does not encode: %v", err)
		}
		same := &hook.GraphDiffSample{Graph: e, Eager: e, TopKGraph: se, TopKEager: se, K: k % 5000, Dtype: dtype}
		if r := c.CompareSample(same, Options{}); r.Divergent {
			t.Fatalf("a sample equal to itself diverged: %s", r.Reason)
		}
		rep := Report(s, &r)
		if r.Divergent {
			_ = Finding(rep, &r)
		}
	})
}
