//go:build !purego

package graphdiff

import "golang.org/x/sys/cpu"

// kernelOut is the per-lane output of pairKernelAVX2 (layout fixed by the
// assembly: six [4]float64 then [4]int64).
type kernelOut struct {
	sumAbs, dd, ee, gg, ge, maxAbs [4]float64
	notClose                       [4]int64
}

//go:noescape
func pairKernelAVX2(g, e []float32, atol, rtol float64, out *kernelOut)

var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

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
