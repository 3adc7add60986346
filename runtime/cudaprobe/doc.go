// Package cudaprobe traces CUDA driver API calls of unmodified processes with
// eBPF uprobes and uretprobes on libcuda.so (github.com/cilium/ebpf; the BPF
// object is built by bpf2go and committed).
//
// What to probe is data (Specs: per driver entry point, which registers or
// memory words hold the stream, graph-exec, handle and size), resolved against
// the library's dynamic symbols including versioned and _v2/_ptsz/_ptds
// variants (Resolve). Attaching is a separate step (Open, Linux/amd64 only)
// that loads one generic uprobe/uretprobe pair and hands each symbol its spec
// in the attach cookie. Each returned call becomes one fixed-size ring-buffer
// record; Decode turns a record into a hook.CUDA, treating the bytes as
// untrusted (bounds- and range-checked, fuzzed). Per-process filtering happens
// in the kernel; records the kernel could not deliver are counted (Lost) and
// reported at exit.
//
// Views derives, in pure Go, what the raw calls mean for CUDA graphs: replays
// per second per stream, capture windows and the streams that joined them,
// and side-stream work captured without an event wait back to the origin
// stream (an ordering hint for multi-stream overlap races).
//
// Error contract: failures are wrapped "verb object: %w"; a host or build that
// cannot attach returns an error matching ErrNotSupported, missing privilege
// matches ErrPermission and says what to grant, and a process without libcuda
// matches ErrNoLibcuda.
package cudaprobe
