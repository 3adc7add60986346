//go:build linux && amd64

package cudaprobe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// needProbe skips (or fails under KVCANARY_REQUIRE_PRIVILEGED=1) when this
// process cannot load and attach the probe.
func needProbe(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "not root: attaching uprobes needs root or CAP_BPF and CAP_PERFMON")
	}
	if err := Supported(); err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("kernel cannot run the probe: %v", err))
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/uprobe"); err != nil {
		if _, err := os.Stat("/sys/kernel/tracing/uprobe_events"); err != nil {
			testenv.SkipOrFail(t, "no uprobe PMU or tracefs uprobe_events: uprobes unsupported")
		}
	}
}

// openProbe opens a probe with cfg and closes it when the test ends.
func openProbe(t testing.TB, cfg Config) *Probe {
	t.Helper()
	p, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// collect runs p until stop is called, returning the calls seen; Run
// failing fails the test.
func collect(t testing.TB, p *Probe) (stop func() []hook.CUDA) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []hook.CUDA
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, func(c hook.CUDA) { mu.Lock(); got = append(got, c); mu.Unlock() })
	}()
	return func() []hook.CUDA {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

func runDriver(t testing.TB, driver, lib string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(driver, args...)
	cmd.Env = append(os.Environ(), "STUB_LIBCUDA="+lib)
	cmd.Stderr = os.Stderr
	return cmd
}

// runScript runs `driver script` once, to its end.
func runScript(t testing.TB, driver, lib string) *exec.Cmd {
	t.Helper()
	cmd := runDriver(t, driver, lib, "script")
	if err := cmd.Run(); err != nil {
		t.Fatalf("driver script: %v", err)
	}
	return cmd
}

// startWaiting starts `driver wait`, which runs the script once release is
// called; release waits for it to end.
func startWaiting(t testing.TB, driver, lib string) (cmd *exec.Cmd, release func()) {
	t.Helper()
	cmd = runDriver(t, driver, lib, "wait")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, func() {
		t.Helper()
		in.Write([]byte{'x'})
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// checkOnlyFrom checks that got is one script's calls, all made by pid.
func checkOnlyFrom(t testing.TB, got []hook.CUDA, pid int) {
	t.Helper()
	if len(got) != scriptEvents {
		t.Fatalf("%d calls, want %d (only process %d)", len(got), scriptEvents, pid)
	}
	for _, c := range got {
		if c.PID != uint32(pid) {
			t.Fatalf("call from process %d, want only %d: %+v", c.PID, pid, c)
		}
	}
}

func TestProbeStubLibcuda(t *testing.T) {
	needProbe(t)
	lib, driver := buildStub(t)
	p := openProbe(t, Config{Lib: lib})
	if len(p.Targets()) != 13 {
		t.Fatalf("%d targets attached, want 13", len(p.Targets()))
	}
	stop := collect(t, p)
	cmd := runScript(t, driver, lib)
	got := stop()
	pid := uint32(cmd.Process.Pid)
	want := scriptCalls()
	if len(got) != len(want) {
		var names []string
		for _, c := range got {
			names = append(names, c.Call)
		}
		t.Fatalf("%d calls, want %d: %v", len(got), len(want), names)
	}
	for i, c := range got {
		w := want[i]
		w.PID, w.TID, w.StartNS, w.EndNS = pid, pid, c.StartNS, c.EndNS
		if c != w {
			t.Errorf("call %d:\n got %+v\nwant %+v", i, c, w)
		}
		if c.EndNS < c.StartNS || (i > 0 && c.StartNS < got[i-1].EndNS) {
			t.Errorf("call %d (%s): times out of order: %d..%d after %d", i, c.Call, c.StartNS, c.EndNS, got[i-1].EndNS)
		}
	}
	var v Views
	for i := range got {
		v.Add(&got[i])
	}
	checkScriptSummary(t, v.Summary(), pid)
	lost, err := p.Lost()
	if err != nil {
		t.Fatal(err)
	}
	if lost.Total() != 0 {
		t.Fatalf("lost %+v", lost)
	}
}

// When Run ends the probes are detached: calls made afterwards never reach
// the ring buffer (so a busy process cannot keep Run's drain going).
func TestProbeRunDetachesWhenDone(t *testing.T) {
	needProbe(t)
	lib, driver := buildStub(t)
	p := openProbe(t, Config{Lib: lib})
	stop := collect(t, p)
	runScript(t, driver, lib)
	if got := stop(); len(got) != len(scriptCalls()) {
		t.Fatalf("while attached: %d calls, want %d", len(got), len(scriptCalls()))
	}
	runScript(t, driver, lib) // after Run
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // drain only
	var after int
	if err := p.Run(ctx, func(hook.CUDA) { after++ }); err != nil {
		t.Fatal(err)
	}
	if after != 0 {
		t.Fatalf("%d calls recorded after Run ended, want 0 (probes still attached)", after)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close after Run detached: %v", err)
	}
}

func TestProbePIDFilter(t *testing.T) {
	needProbe(t)
	lib, driver := buildStub(t)
	// Filter on this test process, which never calls the stub.
	p := openProbe(t, Config{Lib: lib, PIDs: []int{os.Getpid()}})
	stop := collect(t, p)
	runScript(t, driver, lib)
	// A second driver waits on stdin until it is added to the filter.
	cmd, release := startWaiting(t, driver, lib)
	if err := p.AddPID(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	release()
	checkOnlyFrom(t, stop(), cmd.Process.Pid)
}

func TestProbeTrapOnlyPID(t *testing.T) {
	needProbe(t)
	lib, driver := buildStub(t)
	traced, release := startWaiting(t, driver, lib)
	if _, err := Open(Config{Lib: lib, TrapOnlyPIDs: true}); err == nil || !strings.Contains(err.Error(), "exactly one pid") {
		t.Fatalf("TrapOnlyPIDs without a pid: %v", err)
	}
	p := openProbe(t, Config{Lib: lib, PIDs: []int{traced.Process.Pid}, TrapOnlyPIDs: true})
	stop := collect(t, p)
	runScript(t, driver, lib) // another process: never trapped
	release()
	checkOnlyFrom(t, stop(), traced.Process.Pid)
}

func TestProbeCountsLostRecords(t *testing.T) {
	needProbe(t)
	lib, driver := buildStub(t)
	// One page holds 34 records (112 bytes + 8 header); nothing reads while
	// two scripts run 62 calls, so the kernel must count the rest as lost.
	p := openProbe(t, Config{Lib: lib, RingBytes: os.Getpagesize()})
	for range 2 {
		runScript(t, driver, lib)
	}
	got := collect(t, p)()
	lost, err := p.Lost()
	if err != nil {
		t.Fatal(err)
	}
	capacity := uint64(os.Getpagesize() / (RecordSize + 8))
	if lost.RingFull == 0 || uint64(len(got)) > capacity || uint64(len(got))+lost.RingFull != 2*scriptEvents {
		t.Fatalf("delivered %d (capacity %d) + lost %+v, want %d in all", len(got), capacity, lost, 2*scriptEvents)
	}
	if lost.InflightFull != 0 || lost.NoEntry != 0 || lost.Malformed != 0 {
		t.Fatalf("unexpected losses %+v", lost)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(Config{}); err == nil || !strings.Contains(err.Error(), "library path or a process id") {
		t.Fatalf("Open(empty) = %v", err)
	}
	_, err := Open(Config{PIDs: []int{os.Getpid()}})
	if !errors.Is(err, ErrNoLibcuda) {
		t.Fatalf("Open(pid without libcuda) = %v", err)
	}
	lib, _ := buildStub(t)
	if _, err := Open(Config{Lib: lib, RingBytes: 1000}); err == nil || !strings.Contains(err.Error(), "power of two") {
		t.Fatalf("Open(bad ring) = %v", err)
	}
}

// BenchmarkProbeOverhead runs the stub driver's cuLaunchKernel loop with no
// probe, with do-nothing BPF programs on a uprobe and a uretprobe (the kernel's
// trap cost alone), and with the CUDA probe attached, and reports the call
// rates, the attached/detached ratio (the fraction of call throughput left
// under tracing) and the microseconds each probe adds per call.
func BenchmarkProbeOverhead(b *testing.B) {
	needProbe(b)
	const calls = 50000
	loop := func(driver, lib string) float64 {
		out, err := runDriver(b, driver, lib, "loop", strconv.Itoa(calls)).Output()
		if err != nil {
			b.Fatal(err)
		}
		ns, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil || ns <= 0 {
			b.Fatalf("driver output %q: %v", out, err)
		}
		return calls / (ns / 1e9)
	}
	// Three copies of the stub: probes attach to a file's inode, so each
	// configuration needs its own library.
	libPlain, driverPlain := buildStub(b)
	libEmpty, driverEmpty := buildStub(b)
	lib, driver := buildStub(b)

	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	ex, err := link.OpenExecutable(libEmpty)
	if err != nil {
		b.Fatal(err)
	}
	for _, ret := range []bool{false, true} {
		attach := ex.Uprobe
		if ret {
			attach = ex.Uretprobe
		}
		l, err := attach("cuLaunchKernel", empty, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
	}

	p, err := Open(Config{Lib: lib, RingBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var seen uint64
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, func(hook.CUDA) { mu.Lock(); seen++; mu.Unlock() }) }()
	var detached, trap, attached float64
	for b.Loop() {
		detached += loop(driverPlain, libPlain)
		trap += loop(driverEmpty, libEmpty)
		attached += loop(driver, lib)
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	lost, _ := p.Lost()
	n := float64(b.N)
	detached, trap, attached = detached/n, trap/n, attached/n
	b.ReportMetric(detached, "calls/s-detached")
	b.ReportMetric(trap, "calls/s-empty-probes")
	b.ReportMetric(attached, "calls/s-attached")
	b.ReportMetric(attached/detached, "attached/detached")
	b.ReportMetric((1/attached-1/detached)*1e6, "us-added/call")
	b.ReportMetric((1/attached-1/trap)*1e6, "us-over-empty/call")
	mu.Lock()
	defer mu.Unlock()
	if seen+lost.Total() != uint64(b.N)*calls {
		b.Fatalf("saw %d calls + %d lost, want %d", seen, lost.Total(), b.N*calls)
	}
}
