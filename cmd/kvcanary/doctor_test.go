package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/cmd/kvcanary/internal/doctor"
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
		Getenv:         func(string) string { return "" },
		LookPath:       func(f string) (string, error) { return "", &exec.Error{Name: f, Err: exec.ErrNotFound} },
		Environ:        func() []string { return nil },
		PyhookPath:     func() (string, error) { t.Fatal("extracted without python"); return "", nil },
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
	wantContains(t, "output", out,
		"ok    NVML        libnvidia-ml.so.1 loaded, 8 GPU(s): NVIDIA H200 141GB HBM3e ×8\n",
		"ok    driver      NVIDIA 550.54.15, CUDA 12.4\n",
		"ok    privileges  CAP_SYS_ADMIN effective (root)\n",
		"ok    kernel      Linux 6.8.0-45-generic (uprobe attach cookies need 5.15+)\n",
		"ok    BTF         /sys/kernel/btf/vmlinux present\n",
		"ok    uprobes     uprobe programs, ring buffers and attach cookies load (/sys/bus/event_source/devices/uprobe)\n",
		"ok    libcuda     /usr/lib/x86_64-linux-gnu/libcuda.so.1\n",
		"ok    collector   unix:///run/kvcanary.sock accepts connections\n",
		"ok    engines     pid 100 sglang (maps libcuda); pid 101 vllm\n",
	)
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
	wantContains(t, "output", out,
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
		"skip  sglang      no python3 on PATH (name the engine's with --python or KVCANARY_PYTHON)\n",
	)

	out, err = runDoctor(t, env, "", false, "engine", "ebpf")
	if err != cmdutil.FindingError || !strings.HasSuffix(out, "required checks failed: ebpf, engine\n") {
		t.Fatalf("required: %v\n%s", err, out)
	}
	// Required but skipped (no python3 to ask) is no pass.
	out, err = runDoctor(t, env, "", false, "sglang")
	if err != cmdutil.FindingError || !strings.HasSuffix(out, "required checks failed: sglang\n") {
		t.Fatalf("required sglang without python: %v\n%s", err, out)
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
	if len(rep.Failed) != 1 || rep.Failed[0] != "socket" || len(rep.Required) != 1 || len(rep.Checks) != 10 {
		t.Fatalf("report %+v", rep)
	}
	for _, c := range rep.Checks {
		if c.Name == "collector" && (c.Status != "fail" || !strings.Contains(c.Fix, "kvcanary collect --listen unix:///tmp/c.sock")) {
			t.Fatalf("collector check %+v", c)
		}
	}
}

func TestDoctorRequireFlag(t *testing.T) {
	got := mustParse(t, NewCmdDoctor, "--require", "gpu,ebpf", "--socket", "unix:///x.sock", "--json")
	if strings.Join(got.Require, ",") != "gpu,ebpf" || got.Socket != "unix:///x.sock" || !got.JSON.JSON || got.Env.ProcRoot != "/proc" {
		t.Fatalf("options %+v", got)
	}
	if _, _, err := runCmd(NewCmdDoctor, "--require", "gpus"); cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), `"gpus"`) {
		t.Fatalf("bad group: %v", err)
	}
}

func TestDoctorOnThisHost(t *testing.T) {
	ios, _, out, _ := cmdutil.Test()
	err := doctorRun(&DoctorOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Ctx: context.Background(), Env: doctor.SystemEnv()})
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

// fakePython writes an interpreter that answers doctor's two questions:
// find_spec('sglang') exits findSpec; `-m kvcanary.sglang check --json`
// prints check and exits checkExit, and saves the PYTHONPATH it ran with.
func fakePython(t *testing.T, findSpec int, check string, checkExit int) (py, ppFile string) {
	t.Helper()
	dir := t.TempDir()
	ppFile = filepath.Join(dir, "pythonpath")
	if err := os.WriteFile(filepath.Join(dir, "check.out"), []byte(check), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
case "$*" in
*find_spec*) exit %d ;;
"-m kvcanary.sglang check --json")
	printf '%%s' "$PYTHONPATH" > %q
	cat %q
	echo "a warning on stderr" >&2
	exit %d ;;
esac
echo "unexpected arguments: $*" >&2
exit 99
`, findSpec, ppFile, filepath.Join(dir, "check.out"), checkExit)
	py = filepath.Join(dir, "python3")
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return py, ppFile
}

const sglangCheckJSON = `{"sglang_version": "0.5.4", "targets": [
 {"target": "sglang.srt.disaggregation.decode.DecodeTransferQueue.pop_transferred", "hook": "AFTER", "instruments": ["checksum"], "ok": true, "error": ""},
 {"target": "sglang.srt.mem_cache.index_key_cache.IndexKeyCache.move", "hook": "BEFORE", "instruments": ["canary"], "ok": false,
  "error": "module 'sglang.srt.mem_cache.index_key_cache' has no attribute 'IndexKeyCache'"},
 {"target": "sglang.srt.model_executor.model_runner.ModelRunner._forward_raw", "hook": "none", "instruments": [], "ok": true, "error": ""}]}`

func TestDoctorSGLangCheck(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh for the fake interpreter")
	}
	env, _ := fakeDoctorEnv(t)
	pkg := t.TempDir()
	env.PyhookPath = func() (string, error) { return pkg, nil }
	env.Environ = func() []string { return []string{"PATH=" + os.Getenv("PATH"), "PYTHONPATH=/user/site"} }
	env.LookPath = exec.LookPath

	py, ppFile := fakePython(t, 0, sglangCheckJSON, 1)
	ios, _, out, _ := cmdutil.Test()
	err := doctorRun(&DoctorOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Ctx: context.Background(), Python: py, Env: env})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	wantContains(t, "output", out.String(),
		`warn  sglang         SGLang 0.5.4 in `+py+`: 2 of 3 hook targets resolve; instruments that need a missing one stay off: canary`+"\n",
		"→ this SGLang moved a hook target",
		"ok    sglang target  sglang.srt.model_executor.model_runner.ModelRunner._forward_raw (read, not hooked)\n",
		"ok    sglang target  sglang.srt.disaggregation.decode.DecodeTransferQueue.pop_transferred AFTER → checksum\n",
		"warn  sglang target  sglang.srt.mem_cache.index_key_cache.IndexKeyCache.move BEFORE → canary: missing: "+
			"module 'sglang.srt.mem_cache.index_key_cache' has no attribute 'IndexKeyCache'\n",
	)
	if pp, _ := os.ReadFile(ppFile); string(pp) != pkg+":/user/site" {
		t.Errorf("check ran with PYTHONPATH %q, want the package first, then the user's", pp)
	}

	// JSON carries each target as the check reported it; --require sglang fails on a warn.
	ios, _, out, _ = cmdutil.Test()
	err = doctorRun(&DoctorOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: true}, Ctx: context.Background(), Python: py, Env: env, Require: []string{"sglang"}})
	if err != cmdutil.FindingError {
		t.Fatalf("--require sglang with a missing target: %v", err)
	}
	var rep DoctorReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	var targets []SGLangTarget
	for _, c := range rep.Checks {
		if c.Target != nil {
			targets = append(targets, *c.Target)
		}
	}
	if len(targets) != 3 || !targets[0].OK || targets[1].OK || targets[1].Instruments[0] != "canary" || !strings.Contains(targets[1].Error, "no attribute") {
		t.Fatalf("targets %+v", targets)
	}

	// All resolve: ok. The interpreter comes from KVCANARY_PYTHON when --python is not given.
	allOK := strings.Replace(sglangCheckJSON, `"ok": false`, `"ok": true`, 1)
	py2, _ := fakePython(t, 0, allOK, 0)
	env.Getenv = func(k string) string {
		if k == "KVCANARY_PYTHON" {
			return py2
		}
		return ""
	}
	ios, _, out, _ = cmdutil.Test()
	err = doctorRun(&DoctorOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Ctx: context.Background(), Env: env, Require: []string{"sglang"}})
	if err != nil || !strings.Contains(out.String(), "ok    sglang         SGLang 0.5.4 in "+py2+": 3 of 3 hook targets resolve\n") {
		t.Fatalf("all ok via KVCANARY_PYTHON: %v\n%s", err, out)
	}
}

func TestDoctorSGLangNotImportable(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh for the fake interpreter")
	}
	env, _ := fakeDoctorEnv(t)
	env.LookPath = exec.LookPath
	env.PyhookPath = func() (string, error) { return t.TempDir(), nil }
	for _, tc := range []struct {
		name            string
		findSpec        int
		check           string
		checkExit       int
		want, wantNotIn string
	}{
		{"not installed", 4, "", 0, "warn  sglang      sglang is not importable by PY\n", "sglang target"},
		{"broken install", 0, "", 3, `warn  sglang      sglang is found by PY but does not import (exit 3): a warning on stderr` + "\n", "sglang target"},
		{"check missing", 0, "Traceback ...", 1, `warn  sglang      kvcanary.sglang check failed (exit 1; output is not the check's JSON: invalid character 'T'`, "sglang target"},
		{"no targets", 0, `{"sglang_version": "0.5.4", "targets": []}`, 0, "kvcanary.sglang check failed (exit 0; no targets in its JSON)", "sglang target"},
	} {
		py, _ := fakePython(t, tc.findSpec, tc.check, tc.checkExit)
		ios, _, out, _ := cmdutil.Test()
		err := doctorRun(&DoctorOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Ctx: context.Background(), Python: py, Env: env})
		want := strings.ReplaceAll(tc.want, "PY", py)
		if err != nil || !strings.Contains(out.String(), want) || strings.Contains(out.String(), tc.wantNotIn) {
			t.Errorf("%s: %v, want a warn line %q (and no %q):\n%s", tc.name, err, want, tc.wantNotIn, out)
		}
	}

	// A named interpreter that is not there is a warning naming it.
	ios, _, out, _ := cmdutil.Test()
	err := doctorRun(&DoctorOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Ctx: context.Background(), Python: "/no/such/python", Env: env})
	if err != nil || !strings.Contains(out.String(), `warn  sglang      --python /no/such/python: exec: "/no/such/python"`) {
		t.Fatalf("missing --python: %v\n%s", err, out)
	}
}

func TestDoctorPythonFlag(t *testing.T) {
	got := mustParse(t, NewCmdDoctor, "--python", "/opt/venv/bin/python", "--require", "sglang")
	if got.Python != "/opt/venv/bin/python" || got.Require[0] != "sglang" || got.Env.PyhookPath == nil {
		t.Fatalf("options %+v", got)
	}
}
