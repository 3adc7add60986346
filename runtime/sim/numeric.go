package sim

import "math"

// BF16FromFloat32 rounds f to bfloat16 with round-to-nearest-even, the
// rounding torch and CUDA's __float2bfloat16 use. NaN stays a quiet NaN with
// its sign; overflow rounds to ±Inf as IEEE rounding does.
func BF16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToFloat32 widens a bfloat16 bit pattern exactly.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// E4M3Max is the largest finite float8 e4m3fn value.
const E4M3Max = 448

// E4M3FromFloat32 encodes f as float8 e4m3fn (OCP FP8: 1 sign, 4 exponent
// bits with bias 7, 3 mantissa bits, no infinities, 0x7f/0xff NaN) with
// round-to-nearest-even. Finite values beyond ±448 saturate to ±448, as
// saturating quantizers do; NaN maps to 0x7f (with sign).
func E4M3FromFloat32(f float32) uint8 {
	bits := math.Float32bits(f)
	sign := uint8(bits>>24) & 0x80
	if f != f {
		return sign | 0x7f
	}
	a := math.Abs(float64(f))
	if a >= E4M3Max {
		return sign | 0x7e
	}
	const minNormal = 1.0 / 64 // 2^-6
	if a < minNormal {
		// Subnormal: value = m * 2^-9, m in 0..7; m == 8 becomes the smallest normal.
		m := math.RoundToEven(a * 512)
		return sign | uint8(m) // m==8 encodes exponent 1, mantissa 0: 0x08
	}
	frac, exp := math.Frexp(a) // a = frac * 2^exp, frac in [0.5, 1)
	e := exp - 1               // a = (2*frac) * 2^e, 2*frac in [1, 2)
	m := math.RoundToEven((2*frac - 1) * 8)
	if m == 8 {
		m = 0
		e++
	}
	ef := e + 7
	if ef > 15 || (ef == 15 && m == 7) {
		return sign | 0x7e
	}
	return sign | uint8(ef)<<3 | uint8(m)
}

// e4m3Table holds the float32 value of every e4m3fn byte.
var e4m3Table = func() (t [256]float32) {
	for i := range 256 {
		t[i] = e4m3Decode(uint8(i))
	}
	return t
}()

func e4m3Decode(v uint8) float32 {
	sign := float32(1)
	if v&0x80 != 0 {
		sign = -1
	}
	e := int(v>>3) & 0xf
	m := int(v & 7)
	if e == 15 && m == 7 {
		return float32(math.NaN())
	}
	if e == 0 {
		return sign * float32(m) / 512
	}
	return sign * float32(math.Ldexp(1+float64(m)/8, e-7))
}

// E4M3ToFloat32 decodes a float8 e4m3fn byte exactly.
func E4M3ToFloat32(v uint8) float32 { return e4m3Table[v] }
