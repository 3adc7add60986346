// Drives the stub libcuda through a known sequence of driver calls.
//
//   driver script        the capture/replay script the tests assert on
//   driver wait          read one byte from stdin, then the script
//   driver loop N        N cuLaunchKernel calls; prints the elapsed ns
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_types.h"

CUresult cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec e, CUstream s);
CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			unsigned bz, unsigned shmem, CUstream s, void **params, void **extra);
CUresult cuStreamWaitEvent(CUstream s, CUevent ev, unsigned flags);
CUresult cuEventRecord(CUevent ev, CUstream s);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);

#define A ((CUstream)0xA0)
#define B ((CUstream)0xB0)
#define EV_FORK ((CUevent)0xE1)
#define EV_JOIN ((CUevent)0xE2)
#define F1 ((CUfunction)0xF1)
#define F2 ((CUfunction)0xF2)

static void launch(CUfunction f, CUstream s) { cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, s, 0, 0); }

// B forks from A, runs F2 and joins back.
static void fork_join(void)
{
	cuEventRecord(EV_FORK, A);
	cuStreamWaitEvent(B, EV_FORK, 0);
	launch(F2, B);
	cuEventRecord(EV_JOIN, B);
	cuStreamWaitEvent(A, EV_JOIN, 0);
}

static int script(const char *lib)
{
	CUgraph g1, g2;
	CUgraphExec e1, e2;
	CUdeviceptr p;
	static char host[4096];

	// capture 1: B forks from A and joins back
	cuStreamBeginCapture_v2(A, 0);
	launch(F1, A);
	fork_join();
	cuStreamEndCapture(A, &g1);
	cuGraphInstantiateWithFlags(&e1, g1, 0);

	// capture 2: work on B after its join back is never waited for
	cuStreamBeginCapture_v2(A, 0);
	fork_join();
	launch(F2, B);
	cuMemcpyHtoDAsync_v2(0x1000, host, 64, B);
	cuStreamEndCapture(A, &g2);
	cuGraphInstantiateWithFlags(&e2, g2, 0);

	for (int i = 0; i < 5; i++)
		cuGraphLaunch(e1, A);
	for (int i = 0; i < 3; i++)
		cuGraphLaunch_ptsz(e2, A);

	cuMemAlloc_v2(&p, 4096);
	cuMemcpyAsync(p, 0x2000, 4096, A);

	void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
	if (!h) {
		fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
		return 1;
	}
	CUresult (*old)(CUdeviceptr, CUdeviceptr, size_t, CUstream) =
		(CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))dlvsym(h, "cuMemcpyAsync", "LIBCUDA_1.0");
	if (!old) {
		fprintf(stderr, "dlvsym cuMemcpyAsync@LIBCUDA_1.0: %s\n", dlerror());
		return 1;
	}
	old(p, 0x3000, 128, B);
	cuMemFree_v2(p);
	return 0;
}

int main(int argc, char **argv)
{
	const char *lib = getenv("STUB_LIBCUDA");
	if (argc < 2 || !lib) {
		fprintf(stderr, "usage: STUB_LIBCUDA=path driver script|wait|loop N\n");
		return 2;
	}
	if (strcmp(argv[1], "loop") == 0 && argc == 3) {
		long n = atol(argv[2]);
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (long i = 0; i < n; i++)
			launch(F1, A);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("%lld\n", (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
		return 0;
	}
	if (strcmp(argv[1], "wait") == 0) {
		char c;
		if (read(0, &c, 1) != 1)
			return 1;
		return script(lib);
	}
	if (strcmp(argv[1], "script") == 0)
		return script(lib);
	return 2;
}
