//go:build !amd64 || purego

package graphdiff

type kernelOut struct {
	sumAbs, dd, ee, gg, ge, maxAbs [4]float64
	notClose                       [4]int64
}

func pairBlock(g, e []float32, atol, rtol float64, out *kernelOut) bool { return false }

func haveVectorKernel() bool { return false }
