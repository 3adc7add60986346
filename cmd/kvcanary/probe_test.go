package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/cudaprobe"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// fakeCUDAProbe delivers its calls, then waits for the context like a live probe.
type fakeCUDAProbe struct {
	calls  []hook.CUDA
	lost   cudaprobe.Lost
	closed bool
}

func (p *fakeCUDAProbe) Lib() string { return "/usr/lib/x86_64-linux-gnu/libcuda.so.1" }
func (p *fakeCUDAProbe) Targets() []cudaprobe.Target {
	return []cudaprobe.Target{{Symbol: "cuGraphLaunch"}, {Symbol: "cuLaunchKernel"}}
}
func (p *fakeCUDAProbe) Run(ctx context.Context, fn func(hook.CUDA)) error {
	for _, c := range p.calls {
		fn(c)
	}
	<-ctx.Done()
	return nil
}
func (p *fakeCUDAProbe) Lost() (cudaprobe.Lost, error) { return p.lost, nil }
func (p *fakeCUDAProbe) Close() error                  { p.closed = true; return nil }

// cudaOneCapture: stream 0xA captures with side stream 0xB joining, one side
// launch never waited for, then three replays.
func cudaOneCapture() []hook.CUDA {
	c := []hook.CUDA{
		{Call: "cuStreamBeginCapture_v2", Stream: 0xA},
		{Call: "cuEventRecord", Stream: 0xA, Arg: 0xE1},
		{Call: "cuStreamWaitEvent", Stream: 0xB, Arg: 0xE1},
		{Call: "cuLaunchKernel", Stream: 0xB, Arg: 0xF},
		{Call: "cuStreamEndCapture", Stream: 0xA, Arg: 0x60},
		{Call: "cuGraphInstantiateWithFlags", GraphExec: 0x61, Arg: 0x60},
		{Call: "cuGraphLaunch", Stream: 0xA, GraphExec: 0x61},
		{Call: "cuGraphLaunch", Stream: 0xA, GraphExec: 0x61},
		{Call: "cuGraphLaunch", Stream: 0xA, GraphExec: 0x61},
	}
	for i := range c {
		c[i].PID, c[i].TID = 77, 77
		c[i].StartNS = 1_700_000_000_000_000_000 + int64(i)*1_000_000
		c[i].EndNS = c[i].StartNS + 1000
	}
	return c
}

func TestProbeCUDAFlags(t *testing.T) {
	got := mustParse(t, NewCmdProbe, "cuda", "--pid", "42", "--record", "x.kvtrace", "--duration", "2s", "--json")
	if got.PID != 42 || got.Record != "x.kvtrace" || got.Duration != 2*time.Second || !got.JSON.JSON {
		t.Fatalf("options %+v", got)
	}
	wantUsage(t, NewCmdProbe, "cuda") // no --pid/--lib
}

func TestProbeCUDAReportAndRecord(t *testing.T) {
	fp := &fakeCUDAProbe{calls: cudaOneCapture(), lost: cudaprobe.Lost{RingFull: 3}}
	path := filepath.Join(t.TempDir(), "p.kvtrace")
	var cfg cudaprobe.Config
	ios, _, out, _ := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the fake delivers everything, then sees the interrupt
	err := probeCUDARun(&ProbeCUDAOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Ctx: ctx, Now: time.Now, PID: 77,
		Record: path, Run: "r1",
		Open: func(c cudaprobe.Config) (cudaProbe, error) { cfg = c; return fp, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.PIDs) != 1 || cfg.PIDs[0] != 77 || !cfg.TrapOnlyPIDs || cfg.Lib != "" || !fp.closed {
		t.Fatalf("config %+v closed %v", cfg, fp.closed)
	}
	wantContains(t, "output", out.String(),
		"probed /usr/lib/x86_64-linux-gnu/libcuda.so.1 (2 entry points), pid 77",
		"calls: 9 (cuGraphLaunch 3, cuEventRecord 1,",
		"graph replays:", "  77   0x000000000000000a  3        1000.0   1",
		"captures:", "0x0000000000000060  1      0x000000000000000b  1         1     3",
		"ordering hints (1)", "pid 77: cuLaunchKernel on side stream 0x000000000000000b",
		"lost: 3 (ring buffer full 3, entry table full 0, return without entry 0, malformed 0)",
		"recorded 9 events to "+path,
	)
	b := readBundle(t, path)
	if m := b.Manifest; m.Command != "probe cuda" || m.Run != "r1" || m.Labels["pid"] != "77" {
		t.Fatalf("manifest %+v", m)
	}
	for n, ev := range b.Events {
		c := ev.Body.(*hook.CUDA)
		if ev.Kind != hook.KindCUDA || *c != cudaOneCapture()[n] || ev.TS != c.StartNS || ev.Src.PID != 77 {
			t.Fatalf("event %d: %+v %+v", n, ev, c)
		}
	}
	if n := len(b.Events); n != 9 {
		t.Fatalf("%d events recorded", n)
	}
	if ft := b.Footer; ft == nil || ft.Dropped != 3 {
		t.Fatalf("footer %+v", ft)
	}
}

func TestProbeCUDAJSONAndErrors(t *testing.T) {
	ios, _, out, _ := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := probeCUDARun(&ProbeCUDAOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: true}, Ctx: ctx, Now: time.Now, Lib: "/x/libcuda.so.1",
		Open: func(c cudaprobe.Config) (cudaProbe, error) { return &fakeCUDAProbe{calls: cudaOneCapture()}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	var rep ProbeCUDAReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Events != 9 || len(rep.Summary.Captures) != 1 || rep.Summary.HintsTotal != 1 || rep.LostTotal != 0 ||
		len(rep.Targets) != 2 || rep.Summary.Replays[0].Replays != 3 {
		t.Fatalf("report %+v", rep)
	}

	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.Join(cudaprobe.ErrPermission, errors.New("load BPF programs: run as root or grant CAP_BPF and CAP_PERFMON")), "CAP_BPF and CAP_PERFMON"},
		{cudaprobe.ErrNotSupported, "kvcanary doctor"},
		{cudaprobe.ErrNoLibcuda, "libcuda.so not found"},
	} {
		ios, _, _, _ := cmdutil.Test()
		err := probeCUDARun(&ProbeCUDAOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, PID: 5,
			Open: func(cudaprobe.Config) (cudaProbe, error) { return nil, tc.err }})
		if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open error %v → %v", tc.err, err)
		}
	}
}

func TestProbeCUDANoLibcudaForPID(t *testing.T) {
	// The real Open with this test process, which maps no libcuda.
	ios, _, _, _ := cmdutil.Test()
	err := probeCUDARun(&ProbeCUDAOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, PID: 1 << 22, Open: openCUDAProbe})
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), "process 4194304") {
		t.Fatalf("err %v", err)
	}
}

// TestProbeCUDAEmit: `probe cuda --emit` streams every traced call to a
// collector (what the dashboard's CUDA panel reads), in order, as the
// producer "cudaprobe", and says at exit what the stream sent.
func TestProbeCUDAEmit(t *testing.T) {
	addr, evs := testCollector(t)
	ios, _, _, errOut := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	want := cudaOneCapture()
	var got []hook.Event
	done := make(chan error, 1)
	go func() {
		done <- probeCUDARun(&ProbeCUDAOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Ctx: ctx, Now: time.Now, PID: 77, Run: "r2", Emit: addr,
			Open: func(cudaprobe.Config) (cudaProbe, error) { return &fakeCUDAProbe{calls: want}, nil }})
	}()
	timeout := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case ev := <-evs:
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("the collector saw %d of %d calls", len(got), len(want))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, ev := range got {
		c, ok := ev.Body.(*hook.CUDA)
		if ev.Kind != hook.KindCUDA || !ok || *c != want[i] || ev.Run != "r2" || ev.Src.Proc != "cudaprobe" || ev.Src.PID != 77 {
			t.Fatalf("call %d streamed as %+v (body %+v)", i, ev, ev.Body)
		}
	}
	wantContains(t, "stderr", errOut.String(), "probe cuda: emit: 9 events sent to "+addr+", 0 dropped")

	got2 := mustParse(t, NewCmdProbe, "cuda", "--pid", "1", "--emit", "unix:///x.sock")
	if got2.Emit != "unix:///x.sock" {
		t.Fatalf("--emit parsed as %q", got2.Emit)
	}
	ios, _, _, _ = cmdutil.Test()
	fp := &fakeCUDAProbe{}
	err := probeCUDARun(&ProbeCUDAOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, PID: 5, Emit: "ftp://x",
		Open: func(cudaprobe.Config) (cudaProbe, error) { return fp, nil }})
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "--emit") || !fp.closed {
		t.Fatalf("malformed --emit: %v, probe closed %v", err, fp.closed)
	}
}
