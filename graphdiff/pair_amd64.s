//go:build !purego

#include "textflag.h"

// func pairKernelAVX2(g, e []float32, atol, rtol float64, out *kernelOut)
//
// len(g) must be a multiple of 4 and len(e) >= len(g). Per lane of 4 float64:
// out.sumAbs += |g-e|, out.dd += (g-e)², out.ee += e², out.gg += g², out.ge +=
// g·e, out.maxAbs = max(|g-e|), out.notClose += (|g-e| > atol + rtol·|e|).
// Non-finite inputs make the sums non-finite; the caller checks and redoes
// such blocks on the scalar path.
TEXT ·pairKernelAVX2(SB), NOSPLIT, $0-72
	MOVQ g_base+0(FP), SI
	MOVQ g_len+8(FP), CX
	MOVQ e_base+24(FP), DI
	VBROADCASTSD atol+48(FP), Y14
	VBROADCASTSD rtol+56(FP), Y15
	MOVQ out+64(FP), DX
	MOVQ $0x7fffffffffffffff, AX
	MOVQ AX, X13
	VPBROADCASTQ X13, Y13
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VPXOR  Y6, Y6, Y6
	XORQ BX, BX

loop:
	CMPQ BX, CX
	JGE  done
	VCVTPS2PD (SI)(BX*4), Y7     // g
	VCVTPS2PD (DI)(BX*4), Y8     // e
	VSUBPD    Y8, Y7, Y9         // d = g - e
	VANDPD    Y13, Y9, Y10       // |d|
	VADDPD    Y10, Y0, Y0        // sumAbs
	VFMADD231PD Y9, Y9, Y1       // dd += d*d
	VFMADD231PD Y8, Y8, Y2       // ee += e*e
	VFMADD231PD Y7, Y7, Y3       // gg += g*g
	VFMADD231PD Y8, Y7, Y4       // ge += g*e
	VMAXPD    Y10, Y5, Y5        // maxAbs
	VANDPD    Y13, Y8, Y11       // |e|
	VMOVAPD   Y14, Y12
	VFMADD231PD Y15, Y11, Y12    // tol = atol + rtol*|e|
	VCMPPD    $0x1e, Y12, Y10, Y12 // |d| > tol (GT_OQ)
	VPSUBQ    Y12, Y6, Y6        // notClose -= -1
	ADDQ      $4, BX
	JMP       loop

done:
	VMOVUPD Y0, 0(DX)
	VMOVUPD Y1, 32(DX)
	VMOVUPD Y2, 64(DX)
	VMOVUPD Y3, 96(DX)
	VMOVUPD Y4, 128(DX)
	VMOVUPD Y5, 160(DX)
	VMOVDQU Y6, 192(DX)
	VZEROUPPER
	RET
