//go:build !unix

package hook

func processCPUSeconds() float64 { return 0 }
