//go:build !purego

#include "textflag.h"

// func refKernelAVX2(g, e, r []float32, out *[8]float64)
//
// len(g) must be a multiple of 4, len(e), len(r) >= len(g). Per lane:
// out[0:4] = Σ(g-r)², out[4:8] = Σ(e-r)². A non-finite input makes a sum
// non-finite.
TEXT ·refKernelAVX2(SB), NOSPLIT, $0-80
	MOVQ g_base+0(FP), SI
	MOVQ g_len+8(FP), CX
	MOVQ e_base+24(FP), DI
	MOVQ r_base+48(FP), R8
	MOVQ out+72(FP), DX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	XORQ BX, BX

loop:
	CMPQ BX, CX
	JGE  done
	VCVTPS2PD (R8)(BX*4), Y2
	VCVTPS2PD (SI)(BX*4), Y3
	VCVTPS2PD (DI)(BX*4), Y4
	VSUBPD    Y2, Y3, Y3
	VSUBPD    Y2, Y4, Y4
	VFMADD231PD Y3, Y3, Y0
	VFMADD231PD Y4, Y4, Y1
	ADDQ      $4, BX
	JMP       loop

done:
	VMOVUPD Y0, 0(DX)
	VMOVUPD Y1, 32(DX)
	VZEROUPPER
	RET

// func filterGEAVX2(v []float32, t float32, dst []int32) (n, next int)
//
// len(v) must be a multiple of 8. Writes the indices i with v[i] >= t (NaN
// never passes), ascending, to dst, stopping before a group of 8 that might
// not fit; next is the index it stopped at (len(v) when done).
TEXT ·filterGEAVX2(SB), NOSPLIT, $0-72
	MOVQ v_base+0(FP), SI
	MOVQ v_len+8(FP), CX
	VBROADCASTSS t+24(FP), Y1
	MOVQ dst_base+32(FP), DI
	MOVQ dst_len+40(FP), R9
	XORQ BX, BX
	XORQ R10, R10

loop:
	CMPQ BX, CX
	JGE  done
	LEAQ 8(R10), R11
	CMPQ R11, R9
	JGT  done
	VMOVUPS   (SI)(BX*4), Y0
	VCMPPS    $0x1d, Y1, Y0, Y2 // v >= t (GE_OQ)
	VMOVMSKPS Y2, AX
	TESTL     AX, AX
	JZ        next

bits:
	TZCNTL AX, DX
	LEAQ   (BX)(DX*1), R11
	MOVL   R11, (DI)(R10*4)
	INCQ   R10
	BLSRL  AX, AX
	JNZ    bits

next:
	ADDQ $8, BX
	JMP  loop

done:
	MOVQ R10, n+56(FP)
	MOVQ BX, next+64(FP)
	VZEROUPPER
	RET
