package cudaprobe

// The BPF object is compiled with clang and committed (bpf/cudaprobe.c →
// cudaprobe_x86_bpfel.{go,o}); regenerate with `go generate ./runtime/cudaprobe`
// after editing the C file. TestGeneratedObjectsUpToDate checks the committed
// files when clang of the major version in bpf/clang-major is installed
// (regenerate with another clang and update that file together).
//
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -target amd64 -cflags "-O2 -g -Wall -Werror -D__TARGET_ARCH_x86" cudaprobe bpf/cudaprobe.c
