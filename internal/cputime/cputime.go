// Package cputime reads the CPU time this process has used, for benchmarks
// that report throughput per CPU-second next to wall-clock throughput: on a
// shared, noisy machine wall time mostly measures the neighbours, CPU time
// the work done.
//
// Error contract: Process never fails; where the platform cannot tell (not
// unix) or the system call fails it returns 0, and callers skip the metric.
package cputime
