package sim

import (
	"math"
	"testing"
)

func TestBF16KnownValues(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{1, 0x3f80},
		{-2, 0xc000},
		{3.140625, 0x4049},
		{float32(math.Pi), 0x4049}, // 0x40490fdb rounds down
		{math.Float32frombits(0x3f808000), 0x3f80}, // exact tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // exact tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81}, // above tie
		{float32(math.Inf(1)), 0x7f80},
		{math.Float32frombits(0x7f7fffff), 0x7f80}, // max float rounds to +Inf
		{1e-40, 0x0001}, // subnormal 0x000116c2
	}
	for _, c := range cases {
		if got := BF16FromFloat32(c.in); got != c.want {
			t.Errorf("BF16FromFloat32(%g [%08x]) = %04x, want %04x", c.in, math.Float32bits(c.in), got, c.want)
		}
	}
	if got := BF16FromFloat32(float32(math.NaN())); got&0x7f80 != 0x7f80 || got&0x7f == 0 {
		t.Errorf("NaN encodes to %04x, not a NaN", got)
	}
	if BF16ToFloat32(0x4049) != 3.140625 || BF16ToFloat32(0xc000) != -2 {
		t.Error("BF16ToFloat32 mismatch")
	}
}

func TestE4M3KnownValues(t *testing.T) {
	cases := []struct {
		in   float32
		want uint8
	}{
		{0, 0x00},
		{1, 0x38},
		{-1, 0xb8},
		{448, 0x7e},
		{1000, 0x7e}, // saturates
		{-448, 0xfe},
		{0.5, 0x30},
		{1.125, 0x39},
		{1.0625, 0x38},      // tie between 1 and 1.125: even mantissa 0
		{1.1875, 0x3a},      // tie between 1.125 and 1.25: even mantissa 2
		{1.0 / 512, 0x01},   // smallest subnormal
		{7.0 / 512, 0x07},   // largest subnormal
		{1.0 / 64, 0x08},    // smallest normal
		{15.5 / 1024, 0x08}, // rounds up into the normal range
		{240, 0x77},
		{464, 0x7e}, // saturating
	}
	for _, c := range cases {
		if got := E4M3FromFloat32(c.in); got != c.want {
			t.Errorf("E4M3FromFloat32(%g) = %02x, want %02x", c.in, got, c.want)
		}
	}
	if !math.IsNaN(float64(E4M3ToFloat32(0x7f))) {
		t.Error("0x7f must decode to NaN")
	}
	// Round trip of every finite code.
	for v := range 256 {
		f := E4M3ToFloat32(uint8(v))
		if f != f {
			continue
		}
		back := E4M3FromFloat32(f)
		if back != uint8(v) && !(f == 0 && back&0x7f == 0) {
			t.Errorf("code %02x -> %g -> %02x", v, f, back)
		}
	}
	if E4M3ToFloat32(0x7e) != 448 || E4M3ToFloat32(0x38) != 1 {
		t.Error("decode mismatch")
	}
}
