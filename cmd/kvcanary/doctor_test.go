package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/gpu"
	"github.com/kvcanary/kvcanary/runtime/gpu/gputest"
)

// fakeDoctorEnv builds a host: root, Linux 6.8, BTF, uprobes, libcuda in the
// linker cache, an SGLang process mapping libcuda and a vLLM one that does not.
func fakeDoctorEnv(t *testing.T) (DoctorEnv, string) {
	t.Helper()
	proc := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(proc, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("self/status", "Name:\tkvcanary\nCapEff:\t000001ffffffffff\n")
	write("sys/kernel/osrelease", "6.8.0-45-generic\n")
	write("100/cmdline", "python3\x00-m\x00sglang.launch_server\x00--model\x00x\x00")
	write("100/maps", "7f01a000-7f02b000 r-xp 00010000 08:01 456 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n")
	write("101/cmdline", "/usr/bin/python\x00/opt/vllm/entrypoint.py\x00")
	write("101/maps", "")
	write("102/cmdline", "bash\x00")
	write("555/cmdline", "kvcanary\x00doctor\x00--vllm-ish\x00") // ourselves
	have := map[string]bool{
		"/sys/kernel/btf/vmlinux":                true,
		"/sys/bus/event_source/devices/uprobe":   true,
		"/usr/lib/x86_64-linux-gnu/libcuda.so.1": true,
	}
	env := DoctorEnv{
		ProcRoot: proc, SysRoot: "/sys", Self: 555,
		OpenGPU: func() (gpu.Lib, error) { return gputest.H200(8), nil },
		Ldconfig: func() (string, error) {
			return "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n", nil
		},
		Exists:         func(p string) bool { return have[p] },
		ProbeSupported: func() error { return nil },
		Dial:           func(context.Context, string) error { return nil },
	}
	return env, proc
}

func runDoctor(t *testing.T, env DoctorEnv, socket string, json bool, require ...string) (string, error) {
	t.Helper()
	ios, _, out, _ := cmdutil.Test()
	err := doctorRun(&DoctorOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: json}, Ctx: context.Background(),
		Socket: socket, Require: require, Env: env})
	return out.String(), err
}

func TestDoctorHealthyHost(t *testing.T) {
	env, _ := fakeDoctorEnv(t)
	out, err := runDoctor(t, env, "unix:///run/kvcanary.sock", false, "gpu", "ebpf", "libcuda", "engine")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"ok    NVML        libnvidia-ml.so.1 loaded, 8 GPU(s): NVIDIA H200 141GB HBM3e ×8\n",
		"ok    driver      NVIDIA 550.54.15, CUDA 12.4\n",
		"ok    privileges  CAP_SYS_ADMIN effective (root)\n",
		"ok    kernel      Linux 6.8.0-45-generic (uprobe attach cookies need 5.15+)\n",
		"ok    BTF         /sys/kernel/btf/vmlinux present\n",
		"ok    uprobes     uprobe programs, ring buffers and attach cookies load (/sys/bus/event_source/devices/uprobe)\n",
		"ok    libcuda     /usr/lib/x86_64-linux-gnu/libcuda.so.1\n",
		"ok    collector   unix:///run/kvcanary.sock accepts connections\n",
		"ok    engines     pid 100 sglang (maps libcuda); pid 101 vllm\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "→") {
		t.Errorf("fix shown on a healthy host:\n%s", out)
	}
}

func TestDoctorBareHost(t *testing.T) {
	env, proc := fakeDoctorEnv(t)
	env.OpenGPU = func() (gpu.Lib, error) { return nil, gpu.ErrNoGPU }
	env.Exists = func(string) bool { return false }
	env.Ldconfig = func() (string, error) { return "", errors.New("no ldconfig") }
	env.ProbeSupported = func() error { t.Fatal("probed without privileges"); return nil }
	if err := os.WriteFile(filepath.Join(proc, "self/status"), []byte("CapEff:\t0000000000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "sys/kernel/osrelease"), []byte("5.10.0-28-amd64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []string{"100", "101"} {
		os.RemoveAll(filepath.Join(proc, pid))
	}
	out, err := runDoctor(t, env, "", false)
	if err != nil {
		t.Fatalf("no check was asked for, yet %v", err)
	}
	for _, want := range []string{
		"fail  NVML        NVML not found (libnvidia-ml.so.1): no NVIDIA driver on this host\n",
		"→ install the NVIDIA driver",
		"skip  driver      needs NVML\n",
		"fail  privileges  effective capabilities 0x0 lack CAP_BPF and CAP_PERFMON\n",
		"→ run as root or grant CAP_BPF and CAP_PERFMON",
		"fail  kernel      Linux 5.10.0-28-amd64 is older than 5.15\n",
		"warn  BTF         /sys/kernel/btf/vmlinux missing",
		"fail  uprobes     no uprobe PMU and no tracefs uprobe_events\n",
		"warn  libcuda     libcuda.so.1 not in the linker cache or the usual paths\n",
		"skip  collector   no --socket given\n",
		"warn  engines     no SGLang or vLLM process found\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, err = runDoctor(t, env, "", false, "engine", "ebpf")
	if err != cmdutil.FindingError || !strings.HasSuffix(out, "required checks failed: ebpf, engine\n") {
		t.Fatalf("required: %v\n%s", err, out)
	}
}

func TestDoctorSocketAndJSON(t *testing.T) {
	env, _ := fakeDoctorEnv(t)
	env.Dial = func(_ context.Context, addr string) error {
		if addr != "/tmp/c.sock" {
			t.Errorf("dialled %q", addr)
		}
		return errors.New("connect: no such file or directory")
	}
	out, err := runDoctor(t, env, "/tmp/c.sock", true)
	if err != cmdutil.FindingError {
		t.Fatalf("unreachable --socket: %v", err)
	}
	var rep DoctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Failed) != 1 || rep.Failed[0] != "socket" || len(rep.Required) != 1 || len(rep.Checks) != 9 {
		t.Fatalf("report %+v", rep)
	}
	for _, c := range rep.Checks {
		if c.Name == "collector" && (c.Status != "fail" || !strings.Contains(c.Fix, "kvcanary collect --listen unix:///tmp/c.sock")) {
			t.Fatalf("collector check %+v", c)
		}
	}
}

func TestDoctorRequireFlag(t *testing.T) {
	ios, _, _, _ := cmdutil.Test()
	f := &cmdutil.Factory{IO: ios, Now: time.Now, Ctx: context.Background()}
	var got *DoctorOptions
	cmd := NewCmdDoctor(f, func(o *DoctorOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--require", "gpu,ebpf", "--socket", "unix:///x.sock", "--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Require, ",") != "gpu,ebpf" || got.Socket != "unix:///x.sock" || !got.JSON.JSON || got.Env.ProcRoot != "/proc" {
		t.Fatalf("options %+v", got)
	}
	cmd = NewCmdDoctor(f, nil)
	cmd.SetArgs([]string{"--require", "gpus"})
	if err := cmd.Execute(); cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), `"gpus"`) {
		t.Fatalf("bad group: %v", err)
	}
}

func TestDoctorOnThisHost(t *testing.T) {
	ios, _, out, _ := cmdutil.Test()
	err := doctorRun(&DoctorOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Ctx: context.Background(), Env: systemDoctorEnv()})
	if err != nil {
		t.Fatalf("doctor without required checks: %v\n%s", err, out)
	}
	if _, gerr := gpu.Open(); gerr != nil && !strings.Contains(out.String(), gerr.Error()) {
		t.Fatalf("NVML line lacks %q:\n%s", gerr, out)
	}
	if n := strings.Count(out.String(), "\n"); n < 9 || n > 24 {
		t.Fatalf("%d lines: not one screen:\n%s", n, out)
	}
}

func TestKernelVersion(t *testing.T) {
	for rel, want := range map[string][2]int{"6.18.44-fc-v857": {6, 18}, "5.15.0": {5, 15}, "5.4": {5, 4}, "4.19.0-rc1": {4, 19}} {
		ma, mi, ok := kernelVersion(rel)
		if !ok || ma != want[0] || mi != want[1] {
			t.Errorf("%s: %d.%d %v", rel, ma, mi, ok)
		}
	}
	if _, _, ok := kernelVersion("garbage"); ok {
		t.Error("parsed garbage")
	}
}
