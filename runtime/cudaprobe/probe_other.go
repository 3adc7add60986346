//go:build !linux || !amd64

package cudaprobe

import (
	"context"
	"fmt"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

var errPlatform = fmt.Errorf("attach CUDA probes: needs linux/amd64: %w", ErrNotSupported)

// Probe is unavailable on this platform.
type Probe struct{}

// Supported reports that this platform cannot run the probe.
func Supported() error { return errPlatform }

// Open reports that this platform cannot run the probe.
func Open(Config) (*Probe, error) { return nil, errPlatform }

// Lib is empty on this platform.
func (p *Probe) Lib() string { return "" }

// Targets is empty on this platform.
func (p *Probe) Targets() []Target { return nil }

// AddPID reports that this platform cannot run the probe.
func (p *Probe) AddPID(int) error { return errPlatform }

// Run reports that this platform cannot run the probe.
func (p *Probe) Run(context.Context, func(hook.CUDA)) error { return errPlatform }

// Lost is zero on this platform.
func (p *Probe) Lost() (Lost, error) { return Lost{}, nil }

// LastMalformed is nil on this platform.
func (p *Probe) LastMalformed() error { return nil }

// Close does nothing on this platform.
func (p *Probe) Close() error { return nil }
