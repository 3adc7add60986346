package sim

import (
	"encoding/binary"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
	"math"
	"math/rand/v2"
)

// Model geometry (SGLang's DSA indexer layout, scaled-down context).
const (
	HeadDim    = kvlayout.HeadDim    // index head dimension
	PageTokens = kvlayout.PageTokens // tokens per index-K page
	ContextLen = 8192                // longest sequence the model addresses
	TopK       = 64                  // indexer selection budget
	hiddenRow  = 4096                // fp32 elements per row of a main-stream scratch (16 KiB: one logits row)
	contentMix = 0.15                // weight of the token embedding in an index key
	modelSeed  = 0x6b7663616e617279  // "kvcanary": the model's fixed weights
)

// The twin's "weights": a positional code per position and an embedding per
// token, both fixed across runs (they are the model, not the workload).
var (
	posCode = func() []float32 {
		r := rand.New(rand.NewPCG(modelSeed, 1))
		t := make([]float32, ContextLen*HeadDim)
		s := 1 / math.Sqrt(HeadDim)
		for i := range t {
			t[i] = float32(r.NormFloat64() * s)
		}
		return t
	}()
	tokCode = func() []float32 {
		r := rand.New(rand.NewPCG(modelSeed, 2))
		t := make([]float32, defaultVocab.Size()*HeadDim)
		s := 1 / math.Sqrt(HeadDim)
		for i := range t {
			t[i] = float32(r.NormFloat64() * s)
		}
		return t
	}()
)

// indexKey writes the index key of token tok at position pos into dst:
// its positional code plus a small content term. The copy model's query for
// "the position after p" is posCode[p+1], so keys are addressed by position.
func indexKey(pos int, tok Token, dst []float32) {
	p := posCode[(pos%ContextLen)*HeadDim:][:HeadDim]
	c := tokCode[int(tok)*HeadDim:][:HeadDim]
	for i := range dst[:HeadDim] {
		dst[i] = p[i] + contentMix*c[i]
	}
}

// indexQuery writes the indexer query of a request whose last copied
// position is ptr: the code of position ptr+1.
func indexQuery(ptr int, dst []float32) {
	copy(dst[:HeadDim], posCode[((ptr+1)%ContextLen)*HeadDim:][:HeadDim])
}

// encodeKey writes key in the layout's token format: 128 bf16 values, or
// 128 e4m3 bytes plus an fp32 scale (amax/448).
func encodeKeyBF16(key []float32, dst []byte) {
	for i, v := range key[:HeadDim] {
		binary.LittleEndian.PutUint16(dst[2*i:], BF16FromFloat32(v))
	}
}

func encodeKeyFP8(key []float32, k []byte, scale []byte) {
	var amax float32
	for _, v := range key[:HeadDim] {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	s := amax / E4M3Max
	if s == 0 {
		s = 1
	}
	inv := 1 / s
	for i, v := range key[:HeadDim] {
		k[i] = E4M3FromFloat32(v * inv)
	}
	binary.LittleEndian.PutUint32(scale, math.Float32bits(s))
}

// dotBF16Graph is the captured indexer kernel's dot product: four
// interleaved partial sums, combined pairwise.
func dotBF16Graph(q []float32, k []byte) float32 {
	k = k[:2*HeadDim]
	q = q[:HeadDim]
	var a0, a1, a2, a3 float32
	for i := 0; i < HeadDim; i += 4 {
		w := binary.LittleEndian.Uint64(k[2*i:])
		a0 += q[i] * math.Float32frombits(uint32(w)<<16)
		a1 += q[i+1] * math.Float32frombits(uint32(w>>16)<<16)
		a2 += q[i+2] * math.Float32frombits(uint32(w>>32)<<16)
		a3 += q[i+3] * math.Float32frombits(uint32(w>>48)<<16)
	}
	return (a0 + a1) + (a2 + a3)
}

// dotBF16Eager is the eager (torch) path's dot product: one running sum in
// index order. It differs from the graph kernel only by rounding.
func dotBF16Eager(q []float32, k []byte) float32 {
	k = k[:2*HeadDim]
	var a float32
	for i := range HeadDim {
		a += q[i] * math.Float32frombits(uint32(binary.LittleEndian.Uint16(k[2*i:]))<<16)
	}
	return a
}

// dotFP8 is deep_gemm's fp8 paged-MQA dot product as the captured graph runs
// it: dequantize, four interleaved fp32 partial sums, then the token's scale.
func dotFP8(q []float32, k []byte, scale []byte) float32 {
	k = k[:HeadDim]
	q = q[:HeadDim]
	var a0, a1, a2, a3 float32
	for i := 0; i < HeadDim; i += 4 {
		a0 += q[i] * e4m3Table[k[i]]
		a1 += q[i+1] * e4m3Table[k[i+1]]
		a2 += q[i+2] * e4m3Table[k[i+2]]
		a3 += q[i+3] * e4m3Table[k[i+3]]
	}
	return ((a0 + a1) + (a2 + a3)) * math.Float32frombits(binary.LittleEndian.Uint32(scale))
}

// dotFP8Eager is the eager fp8 path's dot product: the same dequantized
// products in one running sum in index order, then the scale. It differs
// from dotFP8 only by rounding (the accumulation order), as the bf16 pair does.
func dotFP8Eager(q []float32, k []byte, scale []byte) float32 {
	k = k[:HeadDim]
	q = q[:HeadDim]
	var a float32
	for i := range HeadDim {
		a += q[i] * e4m3Table[k[i]]
	}
	return a * math.Float32frombits(binary.LittleEndian.Uint32(scale))
}
