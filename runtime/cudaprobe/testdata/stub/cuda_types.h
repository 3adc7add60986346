// The CUDA driver API types the stub library and its driver share, as the
// real cuda.h declares them on x86-64.
#ifndef CUDAPROBE_STUB_CUDA_TYPES_H
#define CUDAPROBE_STUB_CUDA_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void *CUfunction;
typedef uint64_t CUdeviceptr;

#endif
