//go:build !purego

#include "textflag.h"

// HORNER8 takes eight Horner steps p = p·x + c, the constants c from the
// table at off, off+32, …, off+224 (R8), highest degree first.
#define HORNER8(off, x, p) \
	VFMADD213PD (off)(R8), x, p; \
	VFMADD213PD (off+32)(R8), x, p; \
	VFMADD213PD (off+64)(R8), x, p; \
	VFMADD213PD (off+96)(R8), x, p; \
	VFMADD213PD (off+128)(R8), x, p; \
	VFMADD213PD (off+160)(R8), x, p; \
	VFMADD213PD (off+192)(R8), x, p; \
	VFMADD213PD (off+224)(R8), x, p

// func klKernelAVX2(g, e []float32, mE float64, c *[4 * klConstN]float64, out *[12]float64) int
//
// len(e) must be a multiple of 4 and len(g) >= len(e). Per lane of 4 float64,
// with x = e - mE, d = e - g and w = exp(x) (0 where x < -708, x > 0 or NaN;
// d is zeroed there too):
//   out[0:4] += w, out[4:8] += w·d, out[8:12] += w·expm1(-d).
// exp uses k = round(x/ln2), r = x - k·ln2 (two-part ln2), a degree-8
// polynomial (relative error < 3e-10) and 2^k through the exponent bits;
// expm1(-d) is -d·P(-d) with a degree-8 P (relative error < 3e-11 for
// |d| <= 0.35). The result's low 4 bits flag lanes where some |d| > 0.35:
// the caller redoes the block on the scalar path. Constant i of the table is
// replicated at c[4i:4i+4], so FMAs take it as a memory operand.
TEXT ·klKernelAVX2(SB), NOSPLIT, $0-80
	MOVQ g_base+0(FP), SI
	MOVQ e_base+24(FP), DI
	MOVQ e_len+32(FP), CX
	VBROADCASTSD mE+48(FP), Y4
	MOVQ c+56(FP), R8
	MOVQ out+64(FP), DX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y15, Y15, Y15
	XORQ BX, BX

loop:
	CMPQ BX, CX
	JGE  done
	VCVTPS2PD (DI)(BX*4), Y5        // e
	VCVTPS2PD (SI)(BX*4), Y6        // g
	VSUBPD    Y6, Y5, Y6            // d = e - g
	VSUBPD    Y4, Y5, Y5            // x = e - mE
	VMOVUPD 0(R8), Y7          // cutoff
	VCMPPD    $0x1d, Y7, Y5, Y8     // x >= cutoff
	VCMPPD    $0x12, Y15, Y5, Y9    // x <= 0
	VANDPD    Y9, Y8, Y8            // valid
	VMAXPD    Y7, Y5, Y5            // clamp x (NaN, -Inf -> cutoff)
	VANDPD    Y8, Y6, Y6            // d = 0 where invalid
	VMOVUPD 32(R8), Y7          // abs mask
	VANDPD    Y7, Y6, Y9
	VMOVUPD 64(R8), Y7         // 0.35
	VCMPPD    $0x1e, Y7, Y9, Y9     // |d| > 0.35
	VORPD     Y9, Y3, Y3

	// w = exp(x)
	VMOVUPD 96(R8), Y7         // 1/ln2
	VMOVUPD 128(R8), Y9         // shift 1.5·2^52
	VMOVAPD   Y9, Y10
	VFMADD231PD Y7, Y5, Y10         // t = x/ln2 + shift
	VSUBPD    Y9, Y10, Y11          // kd = t - shift
	VPSUBQ    Y9, Y10, Y10          // k = bits(t) - bits(shift)
	VMOVUPD 160(R8), Y7         // ln2 hi
	VFNMADD231PD Y7, Y11, Y5        // r = x - kd·ln2hi
	VMOVUPD 192(R8), Y7         // ln2 lo
	VFNMADD231PD Y7, Y11, Y5        // r -= kd·ln2lo
	VMOVUPD 224(R8), Y7         // c8
	HORNER8(256, Y5, Y7)            // p = p·r + c7 … c0
	VMOVUPD 512(R8), Y9        // int64 1023
	VPADDQ    Y9, Y10, Y10
	VPSLLQ    $52, Y10, Y10         // 2^k
	VMULPD    Y10, Y7, Y7
	VANDPD    Y8, Y7, Y7            // w = 0 where invalid
	VADDPD    Y7, Y0, Y0            // z += w
	VFMADD231PD Y6, Y7, Y1          // a += w·d

	// em = expm1(-d) = u·P(u), u = -d
	VSUBPD    Y6, Y15, Y9           // u
	VMOVUPD 544(R8), Y11       // q9
	HORNER8(576, Y9, Y11)           // p = p·u + q8 … q1
	VMULPD    Y9, Y11, Y11          // em
	VFMADD231PD Y11, Y7, Y2         // b += w·em
	ADDQ      $4, BX
	JMP       loop

done:
	VMOVUPD   Y0, 0(DX)
	VMOVUPD   Y1, 32(DX)
	VMOVUPD   Y2, 64(DX)
	VMOVMSKPD Y3, AX
	MOVQ      AX, ret+72(FP)
	VZEROUPPER
	RET
