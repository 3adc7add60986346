package cudaprobe

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// buildStub compiles testdata/stub into dir: the stub libcuda.so.1 and the driver.
func buildStub(t testing.TB) (lib, driver string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		testenv.SkipOrFail(t, "gcc not found: cannot build the stub libcuda")
	}
	dir := t.TempDir()
	lib = filepath.Join(dir, "libcuda.so.1")
	driver = filepath.Join(dir, "driver")
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-O1", "-Wl,--version-script=testdata/stub/libcuda.map", "-Wl,-soname,libcuda.so.1",
			"-o", lib, "testdata/stub/libcuda_stub.c"},
		{"-O0", "-Wall", "-Werror", "-o", driver, "testdata/stub/driver.c", "-L" + dir, "-l:libcuda.so.1",
			"-Wl,-rpath," + dir, "-ldl"},
	} {
		out, err := exec.Command(gcc, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	return lib, driver
}

// Handles used by testdata/stub/driver.c.
const (
	sA, sB       = hook.Hex64(0xA0), hook.Hex64(0xB0)
	evFork       = hook.Hex64(0xE1)
	evJoin       = hook.Hex64(0xE2)
	fn1, fn2     = hook.Hex64(0xF1), hook.Hex64(0xF2)
	g1, g2       = hook.Hex64(0x6010), hook.Hex64(0x6020)
	x1, x2       = hook.Hex64(0x6110), hook.Hex64(0x6120)
	devPtr       = hook.Hex64(0xD00000 + 4096)
	scriptEvents = 31
)

// scriptCalls is what `driver script` calls, in order, as the probe must report
// it (without pid, tid and times).
func scriptCalls() []hook.CUDA {
	c := func(call string, stream, exec, arg hook.Hex64, bytes uint64) hook.CUDA {
		return hook.CUDA{Call: call, Stream: stream, GraphExec: exec, Arg: arg, Bytes: bytes}
	}
	// fork_join in driver.c: B forks from A, runs fn2 and joins back.
	forkJoin := []hook.CUDA{
		c("cuEventRecord", sA, 0, evFork, 0),
		c("cuStreamWaitEvent", sB, 0, evFork, 0),
		c("cuLaunchKernel", sB, 0, fn2, 0),
		c("cuEventRecord", sB, 0, evJoin, 0),
		c("cuStreamWaitEvent", sA, 0, evJoin, 0),
	}
	// capture 1
	calls := []hook.CUDA{c("cuStreamBeginCapture_v2", sA, 0, 0, 0), c("cuLaunchKernel", sA, 0, fn1, 0)}
	calls = append(calls, forkJoin...)
	calls = append(calls, c("cuStreamEndCapture", sA, 0, g1, 0), c("cuGraphInstantiateWithFlags", 0, x1, g1, 0))
	// capture 2
	calls = append(calls, c("cuStreamBeginCapture_v2", sA, 0, 0, 0))
	calls = append(calls, forkJoin...)
	calls = append(calls,
		c("cuLaunchKernel", sB, 0, fn2, 0),
		c("cuMemcpyHtoDAsync_v2", sB, 0, 0x1000, 64),
		c("cuStreamEndCapture", sA, 0, g2, 0),
		c("cuGraphInstantiateWithFlags", 0, x2, g2, 0),
	)
	for range 5 {
		calls = append(calls, c("cuGraphLaunch", sA, x1, 0, 0))
	}
	for range 3 {
		calls = append(calls, c("cuGraphLaunch_ptsz", sA, x2, 0, 0))
	}
	calls = append(calls,
		c("cuMemAlloc_v2", 0, 0, devPtr, 4096),
		c("cuMemcpyAsync", sA, 0, devPtr, 4096),
		c("cuMemcpyAsync", sB, 0, devPtr, 128), // the LIBCUDA_1.0 version
		c("cuMemFree_v2", 0, 0, devPtr, 0),
	)
	calls[len(calls)-1].Ret = 1
	return calls
}
