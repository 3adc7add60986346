// Package gputest provides an in-memory gpu.Lib (Lib, Device, H200) for tests
// of commands and sources that consume GPU telemetry, without NVML or cgo.
// Each getter returns the error its metric name maps to in Device.Errs, so
// tests can drive the gpu package's error contract (ErrNotSupported,
// ErrPermission, anything else fails a collection).
package gputest
