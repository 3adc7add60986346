//go:build !purego

package graphdiff

import (
	"math"

	"golang.org/x/sys/cpu"
)

// kernelOut is the per-lane output of pairKernelAVX2 (layout fixed by the
// assembly: six [4]float64 then [4]int64).
type kernelOut struct {
	sumAbs, dd, ee, gg, ge, maxAbs [4]float64
	notClose                       [4]int64
}

//go:noescape
func pairKernelAVX2(g, e []float32, atol, rtol float64, out *kernelOut)

var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasBMI1

// pairBlock runs the vector kernel over g[:n], e[:n] (n a multiple of 4) when
// the CPU has AVX2 and FMA; ok is false otherwise.
func pairBlock(g, e []float32, atol, rtol float64, out *kernelOut) bool {
	if !haveAVX2 {
		return false
	}
	pairKernelAVX2(g, e[:len(g)], atol, rtol, out)
	return true
}

func haveVectorKernel() bool { return haveAVX2 }

const klConstN = 26

//go:noescape
func klKernelAVX2(g, e []float32, mE float64, c *[4 * klConstN]float64, out *[12]float64) int

// klConst is the kernel's constant table, each constant replicated across the
// four lanes (offsets fixed by kl_amd64.s).
var klConst = func() (r [4 * klConstN]float64) {
	var c [klConstN]float64
	c[0] = expCutoff
	c[1] = math.Float64frombits(0x7fffffffffffffff)
	c[2] = klVecMaxD
	c[3] = 1 / math.Ln2
	c[4] = expShift
	c[5] = math.Float64frombits(0x3fe62e42fee00000) // ln2 hi
	c[6] = math.Float64frombits(0x3dea39ef35793c76) // ln2 lo
	f := 1.0
	fact := [10]float64{}
	for i := range fact {
		if i > 0 {
			f *= float64(i)
		}
		fact[i] = f
	}
	for i := 0; i <= 8; i++ { // c8 .. c0 at 7..15
		c[7+i] = 1 / fact[8-i]
	}
	c[16] = math.Float64frombits(1023)
	for i := 0; i <= 8; i++ { // q9 .. q1 at 17..25
		c[17+i] = 1 / fact[9-i]
	}
	for i, v := range c {
		r[4*i], r[4*i+1], r[4*i+2], r[4*i+3] = v, v, v, v
	}
	return r
}()

// klBlock runs the vector KL kernel over e[:n], g[:n] (n a multiple of 4),
// returning the lane sums; ok is false when the CPU lacks AVX2/FMA or some
// |e-g| exceeds klVecMaxD (the scalar path then handles the block).
func klBlock(g, e []float32, mE float64) (z, a, b float64, ok bool) {
	if !haveAVX2 {
		return 0, 0, 0, false
	}
	var out [12]float64
	if klKernelAVX2(g[:len(e)], e, mE, &klConst, &out) != 0 {
		return 0, 0, 0, false
	}
	z = (out[0] + out[1]) + (out[2] + out[3])
	a = (out[4] + out[5]) + (out[6] + out[7])
	b = (out[8] + out[9]) + (out[10] + out[11])
	return z, a, b, true
}

//go:noescape
func refKernelAVX2(g, e, r []float32, out *[8]float64)

// refBlock returns Σ(g-r)² and Σ(e-r)² over g[:n] (n a multiple of 4); ok is
// false without the vector kernel.
func refBlock(g, e, r []float32) (sg, se float64, ok bool) {
	if !haveAVX2 {
		return 0, 0, false
	}
	var out [8]float64
	refKernelAVX2(g, e[:len(g)], r[:len(g)], &out)
	return (out[0] + out[1]) + (out[2] + out[3]), (out[4] + out[5]) + (out[6] + out[7]), true
}

//go:noescape
func filterGEAVX2(v []float32, t float32, dst []int32) (n, next int)

// filterGE appends to dst the indices i with v[i] >= t, ascending.
func filterGE(v []float32, t float32, dst []int32) []int32 {
	i := 0
	if haveAVX2 {
		n8 := len(v) &^ 7
		for i < n8 {
			if cap(dst)-len(dst) < 64 {
				dst = append(dst[:cap(dst)], make([]int32, cap(dst)+1024)...)[:len(dst)]
			}
			free := dst[len(dst):cap(dst)]
			n, next := filterGEAVX2(v[i:n8], t, free)
			for j := range free[:n] {
				free[j] += int32(i)
			}
			dst = dst[:len(dst)+n]
			i += next
		}
	}
	for ; i < len(v); i++ {
		if v[i] >= t {
			dst = append(dst, int32(i))
		}
	}
	return dst
}
