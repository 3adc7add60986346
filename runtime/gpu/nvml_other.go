//go:build !linux || !cgo

package gpu

import "fmt"

// Open reports that this build has no NVML support: go-nvml needs cgo on Linux.
func Open() (Lib, error) {
	return nil, fmt.Errorf("open NVML: this kvcanary build has no NVML support (needs linux and cgo): %w", ErrNotSupported)
}

// OpenPath is Open with an explicit library path.
func OpenPath(string) (Lib, error) { return Open() }
