// Package doctor holds the checks of `kvcanary doctor`: what this host
// offers kvcanary's live sources (GPU and driver through NVML, eBPF
// privileges, kernel and uprobes, libcuda, a collector socket, running
// engines, the engine's Python and SGLang hook targets), each a Check that
// is ok, warn, fail or skip with what to do when it is not ok.
//
// Everything it inspects comes through an Env (SystemEnv for the real host),
// so tests describe a host instead of needing one. Error contract: a check
// never returns an error; what went wrong is its Status and Detail, and
// untrusted strings in a Detail (device names, paths, Python output) are
// quoted with safetext.Quote.
package doctor
