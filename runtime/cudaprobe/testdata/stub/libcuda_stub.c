// A stand-in for libcuda.so.1 exporting the driver entry points cudaprobe
// traces, with the real x86-64 signatures. Each function only records what a
// driver would hand back through out-pointers, so the probe's reads can be
// checked. Built by the tests with gcc; never used outside them.
#include "cuda_types.h"

static uintptr_t graphs;
static volatile int sink;

#define TOUCH(v) (sink += (int)(uintptr_t)(v))

CUresult cuStreamBeginCapture_v2(CUstream s, int mode) { TOUCH(s); TOUCH(mode); return 0; }

CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
	graphs += 0x10;
	*g = (CUgraph)(0x6000 + graphs);
	TOUCH(s);
	return 0;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
	*e = (CUgraphExec)((uintptr_t)g + 0x100);
	TOUCH(flags);
	return 0;
}

CUresult cuGraphLaunch(CUgraphExec e, CUstream s) { TOUCH(e); TOUCH(s); return 0; }
CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { TOUCH(s); TOUCH(e); sink++; return 0; }

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
	TOUCH(f); TOUCH(gx + gy + gz + bx + by + bz + shmem); TOUCH(s); TOUCH(params); TOUCH(extra);
	return 0;
}

CUresult cuStreamWaitEvent(CUstream s, CUevent ev, unsigned flags) { TOUCH(s); TOUCH(ev); TOUCH(flags); return 0; }
CUresult cuEventRecord(CUevent ev, CUstream s) { TOUCH(ev); TOUCH(s); sink--; return 0; }

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { *p = 0xD00000 + n; return 0; }
CUresult cuMemFree_v2(CUdeviceptr p) { TOUCH(p); return 1; /* CUDA_ERROR_INVALID_VALUE */ }

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	TOUCH(dst); TOUCH(src); TOUCH(n); TOUCH(s);
	return 0;
}

// Two versions of cuMemcpyAsync: the default LIBCUDA_1.1 and a hidden LIBCUDA_1.0.
CUresult cuMemcpyAsync_new(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	TOUCH(dst); TOUCH(src); TOUCH(n); TOUCH(s);
	return 0;
}
CUresult cuMemcpyAsync_old(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	TOUCH(s); TOUCH(n); TOUCH(src); TOUCH(dst); sink++;
	return 0;
}
__asm__(".symver cuMemcpyAsync_new,cuMemcpyAsync@@LIBCUDA_1.1");
__asm__(".symver cuMemcpyAsync_old,cuMemcpyAsync@LIBCUDA_1.0");

// Not traced: must not be resolved.
CUresult cuInit(unsigned flags) { TOUCH(flags); return 0; }
