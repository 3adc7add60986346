// Package gpu reads NVIDIA GPU telemetry through NVML (github.com/NVIDIA/go-nvml)
// behind a narrow interface of our own (Lib, Device), so everything above it can
// be tested without a GPU: devices, memory used/total, utilization, temperature,
// power, clocks, volatile ECC counts, the PCIe replay counter, retired pages and
// remapped rows, running compute processes, and a stream of Xid critical errors
// from an NVML event set. A Sampler turns periodic readings into hook.KindGPU
// events for watch/repro (--gpu) and the bundle writer.
//
// go-nvml is dlopen'd at run time: a binary built here runs on a host without an
// NVIDIA driver, where Open returns ErrNoGPU. go-nvml needs cgo; a build without
// cgo (or for another OS) gets a stub whose Open returns an error matching
// ErrNotSupported.
//
// Error contract: failures are wrapped "verb object: %w". NVML return codes stay
// inside the chain (errors.As with an nvml.Return works in cgo builds), and the
// sentinels ErrNoGPU, ErrNotSupported and ErrPermission match with errors.Is.
// Collect skips a metric NVML reports as unsupported or forbidden on a device
// (it lists it in Sample.Skipped) and fails on anything else.
package gpu
