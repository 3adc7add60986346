package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/gpu"
	"github.com/kvcanary/kvcanary/runtime/gpu/gputest"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

func TestGPUFlags(t *testing.T) {
	wantOptions(t, NewCmdGPU, []string{"--watch", "250ms", "--json"}, func(o *GPUOptions) bool {
		return o.Watch == 250*time.Millisecond && o.JSON.JSON
	})
}

func TestGPUNoDriverExit3WithHint(t *testing.T) {
	ios, _, out, _ := cmdutil.Test()
	err := gpuRun(&GPUOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Open: func() (gpu.Lib, error) { return nil, gpu.ErrNoGPU }})
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !errors.Is(err, gpu.ErrNoGPU) {
		t.Fatalf("err %v code %d", err, cmdutil.ExitCode(err))
	}
	want := "NVML not found (libnvidia-ml.so.1): no NVIDIA driver on this host\nhint: run `kvcanary doctor` to see what this host lacks"
	if err.Error() != want {
		t.Fatalf("message %q", err.Error())
	}
	if out.Len() != 0 {
		t.Fatalf("stdout %q", out)
	}
}

func TestGPUOnThisHost(t *testing.T) {
	// The real Open: on a host without NVIDIA's library it must be ErrNoGPU with exit 3.
	ios, _, _, _ := cmdutil.Test()
	err := gpuRun(&GPUOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Open: gpu.Open, Now: time.Now})
	if err == nil {
		t.Skip("this host has NVML; the no-driver path is covered with a fake")
	}
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), "kvcanary doctor") {
		t.Fatalf("err %v", err)
	}
}

func TestGPUOneSampleOutputs(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name, mode string
		want       []string
	}{
		{"tty", "tty", []string{"driver 550.54.15  CUDA 12.4  2 GPU(s)  2026-01-02T03:04:05Z", "GPU  NAME", "1    NVIDIA H200 141GB HBM3e  2.0/141.0", "  GPU 1  pid 1001  2.0 GiB", "GPU 1: unavailable: power: not supported"}},
		{"pipe", "pipe", []string{`gpu=0 name="NVIDIA H200 141GB HBM3e" uuid=GPU-00000000 mem_used=1073741824 mem_total=151397597184 util=0`, "gpu=1 ", "power_mw=0 ", "procs=1001:2147483648"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib := gputest.H200(2)
			lib.Devs[1].Errs = map[string]error{"power": gpu.ErrNotSupported}
			ios, _, out, _ := cmdutil.Test()
			ios.SetTTY(tc.mode == "tty", false)
			err := gpuRun(&GPUOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Now: func() time.Time { return at },
				Open: func() (gpu.Lib, error) { return lib, nil }})
			if err != nil {
				t.Fatal(err)
			}
			wantContains(t, "output", out.String(), tc.want...)
			if !lib.IsClosed() {
				t.Error("lib not closed")
			}
		})
	}
}

func TestGPUJSONAndWatch(t *testing.T) {
	lib := gputest.H200(3)
	lib.Xids = []gpu.Xid{{Device: 2, Code: 79}}
	ios, _, out, _ := cmdutil.Test()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// cancel once a sample shows the Xid and at least two samples are out
	// (the Xid may already be in the first sample on a slow machine)
	w := &gpuCancelOn{buf: out, needle: `"xid": 79`, cancel: cancel, samples: 2}
	ios.Out = w
	err := gpuRun(&GPUOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: true}, Ctx: ctx, Watch: time.Millisecond,
		Now: time.Now, Open: func() (gpu.Lib, error) { return lib, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() == context.DeadlineExceeded {
		t.Fatal("Xid never showed up in --watch output")
	}
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	n := 0
	var last GPUReport
	for dec.More() {
		if err := dec.Decode(&last); err != nil {
			t.Fatalf("sample %d: %v", n, err)
		}
		n++
	}
	if n < 2 || len(last.Devices) != 3 || last.Devices[2].Xid != 79 || last.CUDA != "12.4" || last.Devices[0].MemTotal != 144384<<20 {
		t.Fatalf("%d samples, last %+v", n, last)
	}
}

type gpuCancelOn struct {
	buf     *bytes.Buffer
	needle  string
	cancel  func()
	samples int // also wait for this many samples ("ts_ns" keys) in buf
	seen    bool
}

func (c *gpuCancelOn) Write(p []byte) (int, error) {
	n, err := c.buf.Write(p)
	c.seen = c.seen || strings.Contains(string(p), c.needle)
	if c.seen && strings.Count(c.buf.String(), `"ts_ns"`) >= c.samples {
		c.cancel()
	}
	return n, err
}

// testCollector listens on a Unix socket and hands every event it receives
// to the returned channel (buffered; a test reads what it needs).
func testCollector(t *testing.T) (string, <-chan hook.Event) {
	t.Helper()
	addr := "unix://" + filepath.Join(t.TempDir(), "c.sock")
	c, err := hook.Listen(addr, hook.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	evs := make(chan hook.Event, 4096)
	served := make(chan error, 1)
	go func() {
		served <- c.Serve(ctx, hook.PublishFunc(func(ev hook.Event) {
			select {
			case evs <- ev:
			default:
			}
		}))
	}()
	t.Cleanup(func() { cancel(); <-served; c.Close() })
	return addr, evs
}

// TestGPUEmitFeedsCollector: `gpu --emit` streams NVML samples to a
// collector (what the dashboard's GPU panel reads), stamped with the run and
// the producer "gpu"; --record keeps the same samples in a bundle; stderr
// accounts for the stream at exit.
func TestGPUEmitFeedsCollector(t *testing.T) {
	addr, evs := testCollector(t)
	lib := gputest.H200(2)
	path := filepath.Join(t.TempDir(), "gpu.kvtrace")
	ios, _, out, errOut := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- gpuRun(&GPUOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Ctx: ctx, Now: time.Now, Emit: addr, Record: path, Run: "host-a",
			Watch: 5 * time.Millisecond, Open: func() (gpu.Lib, error) { return lib, nil }})
	}()
	var got []hook.Event
	timeout := time.After(30 * time.Second)
	for len(got) < 3 {
		select {
		case ev := <-evs:
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("the collector saw %d samples in 30s", len(got))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, ev := range got {
		b, ok := ev.Body.(*hook.GPU)
		if ev.Kind != hook.KindGPU || !ok || len(b.Devices) != 2 || b.Devices[1].MemTotal != 144384<<20 || b.CUDA != 12040 ||
			ev.Run != "host-a" || ev.Src.Proc != "gpu" {
			t.Fatalf("streamed %+v (body %+v)", ev, ev.Body)
		}
	}
	// --watch was given: the samples were printed too.
	if n := strings.Count(out.String(), `gpu=1 name="NVIDIA H200 141GB HBM3e"`); n < 3 {
		t.Errorf("%d samples printed with --watch:\n%s", n, out)
	}
	wantContains(t, "stderr", errOut.String(), "gpu: emit: ", " events sent to "+addr+", 0 dropped", "gpu: recorded ")
	b := readBundle(t, path)
	if b.Manifest.Command != "gpu" || b.Manifest.Run != "host-a" || len(b.Events) < 3 {
		t.Fatalf("bundle: manifest %+v, %d events", b.Manifest, len(b.Events))
	}
	for _, ev := range b.Events {
		if g, ok := ev.Body.(*hook.GPU); !ok || len(g.Devices) != 2 {
			t.Fatalf("recorded %+v", ev)
		}
	}
	if !lib.IsClosed() {
		t.Error("lib not closed")
	}
}

// TestGPUEmitQuietAndBadAddress: without --watch, --emit prints no samples;
// a malformed address is a usage error naming --emit, and NVML is not
// left open.
func TestGPUEmitQuietAndBadAddress(t *testing.T) {
	addr, evs := testCollector(t)
	ios, _, out, _ := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-evs; cancel() }()
	if err := gpuRun(&GPUOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Ctx: ctx, Now: time.Now, Emit: addr,
		Open: func() (gpu.Lib, error) { return gputest.H200(1), nil }}); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("--emit without --watch printed samples: %q", out)
	}
	lib := gputest.H200(1)
	ios, _, _, _ = cmdutil.Test()
	err := gpuRun(&GPUOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Now: time.Now, Emit: "ftp://x", Open: func() (gpu.Lib, error) { return lib, nil }})
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "--emit") || !lib.IsClosed() {
		t.Fatalf("malformed --emit: %v (code %d), lib closed %v", err, cmdutil.ExitCode(err), lib.IsClosed())
	}
	wantOptions(t, NewCmdGPU, []string{"--emit", "unix:///x.sock", "--record", "g.kvtrace", "--run", "r"}, func(o *GPUOptions) bool {
		return o.Emit == "unix:///x.sock" && o.Record == "g.kvtrace" && o.Run == "r"
	})
}
