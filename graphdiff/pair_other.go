//go:build !amd64 || purego

package graphdiff

type kernelOut struct {
	sumAbs, dd, ee, gg, ge, maxAbs [4]float64
	notClose                       [4]int64
}

func pairBlock(g, e []float32, atol, rtol float64, out *kernelOut) bool { return false }

func haveVectorKernel() bool { return false }

func klBlock(g, e []float32, mE float64) (z, a, b float64, ok bool) { return 0, 0, 0, false }

func refBlock(g, e, r []float32) (sg, se float64, ok bool) { return 0, 0, false }

// filterGE appends to dst the indices i with v[i] >= t, ascending.
func filterGE(v []float32, t float32, dst []int32) []int32 {
	for i, f := range v {
		if f >= t {
			dst = append(dst, int32(i))
		}
	}
	return dst
}
