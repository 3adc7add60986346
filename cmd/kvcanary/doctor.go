package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/cudaprobe"
	"github.com/kvcanary/kvcanary/runtime/gpu"
	"github.com/kvcanary/kvcanary/runtime/pyhook"
)

// Doctor check statuses.
const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "fail"
	statusSkip = "skip"
)

// Doctor check groups, the names --require takes.
var doctorGroups = []string{"gpu", "ebpf", "libcuda", "socket", "engine", "sglang"}

// DoctorCheck is one line of `kvcanary doctor`.
type DoctorCheck struct {
	Name   string `json:"name"`
	Group  string `json:"group,omitempty"` // what --require names; empty for informational lines
	Status string `json:"status"`          // ok | warn | fail | skip
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"` // what to do when not ok
	// Target is the hook target of a "sglang target" line, as
	// kvcanary.sglang check reported it.
	Target *SGLangTarget `json:"target,omitempty"`
}

// DoctorReport is the --json shape of `kvcanary doctor`.
type DoctorReport struct {
	Checks   []DoctorCheck `json:"checks"`
	Required []string      `json:"required,omitempty"`
	Failed   []string      `json:"failed,omitempty"` // required groups that did not pass
}

// DoctorEnv is the outside world doctor inspects; tests replace each piece.
type DoctorEnv struct {
	ProcRoot       string // "/proc"
	SysRoot        string // "/sys"
	Self           int    // own pid, left out of the engine scan
	OpenGPU        func() (gpu.Lib, error)
	Ldconfig       func() (string, error) // `ldconfig -p`
	Exists         func(path string) bool
	ProbeSupported func() error // loads test programs; called only with privileges
	Dial           func(ctx context.Context, addr string) error
	// Python and SGLang: the interpreter is --python, else
	// $KVCANARY_PYTHON, else python3 on PATH.
	Getenv     func(string) string
	LookPath   func(string) (string, error)
	Environ    func() []string
	PyhookPath func() (string, error) // the extracted package (pyhook.Extract)
}

// DoctorOptions are the inputs of `kvcanary doctor`.
type DoctorOptions struct {
	IO      *cmdutil.IOStreams
	JSON    *cmdutil.JSONFlags
	Ctx     context.Context
	Socket  string
	Python  string // --python: the engine's interpreter
	Require []string
	Env     DoctorEnv
}

// NewCmdDoctor builds `kvcanary doctor`.
func NewCmdDoctor(f *cmdutil.Factory, runF func(*DoctorOptions) error) *cobra.Command {
	opts := &DoctorOptions{IO: f.IO, Ctx: f.Ctx, Env: systemDoctorEnv()}
	cmd := &cobra.Command{
		Use:   "doctor [--socket ADDR] [--require GROUP,...]",
		Short: "Check what this host offers kvcanary: GPU, eBPF, libcuda, collector, engines",
		Example: `  kvcanary doctor
  kvcanary doctor --require gpu,ebpf --json
  kvcanary doctor --socket unix:///tmp/kvcanary.sock --python /opt/sglang/bin/python`,
		Long: `Check, on one screen, what this host offers kvcanary's live sources:

  gpu      NVML found (libnvidia-ml.so.1), devices, driver and CUDA versions
  ebpf     privileges (root or CAP_BPF and CAP_PERFMON), kernel version, BTF,
           uprobe support — what "kvcanary probe cuda" needs
  libcuda  where libcuda.so.1 is (linker cache, common paths)
  socket   the collector socket given with --socket is reachable
  engine   SGLang / vLLM processes running, and whether they map libcuda
  sglang   the engine's Python imports sglang, and kvcanary's hook targets
           resolve in it (python3 -m kvcanary.sglang check, with the package
           this binary carries on PYTHONPATH); the interpreter is --python,
           else $KVCANARY_PYTHON, else python3 on PATH

Each line is ok, warn, fail or skip, with what to do when it is not ok.

Exit status: 0 unless a check you asked for fails — the socket check when
--socket is given, and every group named in --require (a warn or a skip
counts as a failure there) — then 1.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, g := range opts.Require {
				if !doctorHas(doctorGroups, g) {
					return cmdutil.UsageError("--require %q: want one of %s", g, strings.Join(doctorGroups, ", "))
				}
			}
			if runF != nil {
				return runF(opts)
			}
			return doctorRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Socket, "socket", "", "check the collector at `ADDR` (unix:///path.sock, a socket path, or tcp://host:port)")
	cmd.Flags().StringVar(&opts.Python, "python", "", "the engine's Python `interpreter` for the sglang checks (default $KVCANARY_PYTHON, else python3 on PATH)")
	cmd.Flags().StringSliceVar(&opts.Require, "require", nil, "exit 1 unless these `groups` pass: "+strings.Join(doctorGroups, ","))
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func doctorHas(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func systemDoctorEnv() DoctorEnv {
	return DoctorEnv{
		ProcRoot: "/proc", SysRoot: "/sys", Self: os.Getpid(),
		OpenGPU: gpu.Open,
		Ldconfig: func() (string, error) {
			out, err := exec.Command("ldconfig", "-p").Output()
			return string(out), err
		},
		Exists:         func(p string) bool { _, err := os.Stat(p); return err == nil },
		ProbeSupported: cudaprobe.Supported,
		Dial: func(ctx context.Context, addr string) error {
			network, a := "unix", addr
			if rest, ok := strings.CutPrefix(addr, "unix://"); ok {
				a = rest
			} else if rest, ok := strings.CutPrefix(addr, "tcp://"); ok {
				network, a = "tcp", rest
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, a)
			if err != nil {
				return err
			}
			return c.Close()
		},
		Getenv:     os.Getenv,
		LookPath:   exec.LookPath,
		Environ:    os.Environ,
		PyhookPath: func() (string, error) { return pyhook.Extract("") },
	}
}

func doctorRun(opts *DoctorOptions) error {
	ctx := opts.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	rep := DoctorReport{Checks: doctorChecks(ctx, opts.Env, opts.Socket, opts.Python)}
	required := append([]string(nil), opts.Require...)
	if opts.Socket != "" && !doctorHas(required, "socket") {
		required = append(required, "socket")
	}
	sort.Strings(required)
	rep.Required = required
	for _, g := range required {
		for _, c := range rep.Checks {
			// A required check that could not run (skip) did not pass either.
			if c.Group == g && c.Status != statusOK {
				rep.Failed = append(rep.Failed, g)
				break
			}
		}
	}
	if opts.JSON.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, rep); err != nil {
			return err
		}
	} else if err := printDoctor(opts.IO.Out, rep); err != nil {
		return err
	}
	if len(rep.Failed) > 0 {
		return cmdutil.FindingError
	}
	return nil
}

func printDoctor(w io.Writer, rep DoctorReport) error {
	width := 0
	for _, c := range rep.Checks {
		width = max(width, len(c.Name))
	}
	for _, c := range rep.Checks {
		fmt.Fprintf(w, "%-4s  %-*s  %s\n", c.Status, width, c.Name, c.Detail)
		if c.Fix != "" && c.Status != statusOK {
			fmt.Fprintf(w, "      %*s  → %s\n", width, "", c.Fix)
		}
	}
	if len(rep.Failed) > 0 {
		_, err := fmt.Fprintf(w, "required checks failed: %s\n", strings.Join(rep.Failed, ", "))
		return err
	}
	return nil
}

func doctorChecks(ctx context.Context, env DoctorEnv, socket, python string) []DoctorCheck {
	var cs []DoctorCheck
	cs = append(cs, gpuChecks(env)...)
	cs = append(cs, ebpfChecks(env)...)
	cs = append(cs, libcudaCheck(env))
	cs = append(cs, socketCheck(ctx, env, socket))
	cs = append(cs, engineCheck(env))
	cs = append(cs, sglangChecks(ctx, env, python)...)
	return cs
}

func gpuChecks(env DoctorEnv) []DoctorCheck {
	nvmlC := DoctorCheck{Name: "NVML", Group: "gpu"}
	drv := DoctorCheck{Name: "driver", Group: "gpu"}
	lib, err := env.OpenGPU()
	if err != nil {
		nvmlC.Status, nvmlC.Detail = statusFail, err.Error()
		nvmlC.Fix = "install the NVIDIA driver (it ships libnvidia-ml.so.1) or run on a GPU host; every command also runs on the twin (kvcanary sim)"
		if errors.Is(err, gpu.ErrNotSupported) {
			nvmlC.Fix = "use a linux build with cgo (the release binaries are)"
		}
		drv.Status, drv.Detail = statusSkip, "needs NVML"
		return []DoctorCheck{nvmlC, drv}
	}
	defer lib.Close()
	devs, err := lib.Devices()
	if err != nil {
		nvmlC.Status, nvmlC.Detail = statusFail, err.Error()
		nvmlC.Fix = "check `nvidia-smi`; a GPU that fell off the bus needs a reset"
	} else {
		nvmlC.Status = statusOK
		nvmlC.Detail = fmt.Sprintf("libnvidia-ml.so.1 loaded, %d GPU(s)%s", len(devs), deviceNames(devs))
		if len(devs) == 0 {
			nvmlC.Status, nvmlC.Fix = statusWarn, "no GPU visible: check CUDA_VISIBLE_DEVICES / container device mounts"
		}
	}
	v, verr := lib.DriverVersion()
	c, cerr := lib.CUDADriverVersion()
	if verr != nil || cerr != nil {
		drv.Status, drv.Detail = statusWarn, fmt.Sprintf("cannot read versions: %v", errors.Join(verr, cerr))
	} else {
		drv.Status, drv.Detail = statusOK, fmt.Sprintf("NVIDIA %s, CUDA %s", v, gpu.CUDAVersion(c))
	}
	return []DoctorCheck{nvmlC, drv}
}

// deviceNames summarises device names: ": NVIDIA H200 141GB HBM3e ×8".
func deviceNames(devs []gpu.Device) string {
	counts := map[string]int{}
	var order []string
	for _, d := range devs {
		n, err := d.Name()
		if err != nil {
			n = "unknown"
		}
		if counts[n] == 0 {
			order = append(order, n)
		}
		counts[n]++
	}
	parts := make([]string, len(order))
	for i, n := range order {
		parts[i] = fmt.Sprintf("%s ×%d", cmdutil.Quote(n), counts[n])
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

// Linux capability bits.
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

func ebpfChecks(env DoctorEnv) []DoctorCheck {
	priv := DoctorCheck{Name: "privileges", Group: "ebpf"}
	capEff, err := effectiveCaps(filepath.Join(env.ProcRoot, "self", "status"))
	has := func(bit uint) bool { return capEff&(1<<bit) != 0 }
	privileged := err == nil && (has(capSysAdmin) || (has(capBPF) && has(capPerfmon)))
	switch {
	case err != nil:
		priv.Status, priv.Detail = statusWarn, err.Error()
	case privileged:
		priv.Status = statusOK
		priv.Detail = "CAP_BPF and CAP_PERFMON effective"
		if has(capSysAdmin) {
			priv.Detail = "CAP_SYS_ADMIN effective (root)"
		}
	default:
		priv.Status, priv.Detail = statusFail, fmt.Sprintf("effective capabilities %#x lack CAP_BPF and CAP_PERFMON", capEff)
	}
	if priv.Status != statusOK {
		priv.Fix = "run as root or grant CAP_BPF and CAP_PERFMON (e.g. sudo setcap cap_bpf,cap_perfmon+ep $(which kvcanary))"
	}

	kern := DoctorCheck{Name: "kernel", Group: "ebpf"}
	rel, err := os.ReadFile(filepath.Join(env.ProcRoot, "sys", "kernel", "osrelease"))
	release := strings.TrimSpace(string(rel))
	switch major, minor, ok := kernelVersion(release); {
	case err != nil:
		kern.Status, kern.Detail = statusWarn, fmt.Sprintf("cannot read kernel release: %v", err)
	case !ok:
		kern.Status, kern.Detail = statusWarn, fmt.Sprintf("cannot parse kernel release %s", cmdutil.Quote(release))
	case major > 5 || (major == 5 && minor >= 15):
		kern.Status, kern.Detail = statusOK, "Linux "+cmdutil.Quote(release)+" (uprobe attach cookies need 5.15+)"
	default:
		kern.Status, kern.Detail = statusFail, "Linux "+cmdutil.Quote(release)+" is older than 5.15"
		kern.Fix = "the CUDA probe needs bpf_get_attach_cookie (Linux 5.15+): upgrade the kernel"
	}

	btf := DoctorCheck{Name: "BTF", Status: statusOK}
	btfPath := filepath.Join(env.SysRoot, "kernel", "btf", "vmlinux")
	if env.Exists(btfPath) {
		btf.Detail = btfPath + " present"
	} else {
		btf.Status, btf.Detail = statusWarn, btfPath+" missing (the CUDA probe does not need it; other eBPF tools may)"
		btf.Fix = "enable CONFIG_DEBUG_INFO_BTF in the kernel if other tools need it"
	}

	up := DoctorCheck{Name: "uprobes", Group: "ebpf"}
	var found string
	for _, p := range []string{
		filepath.Join(env.SysRoot, "bus", "event_source", "devices", "uprobe"),
		filepath.Join(env.SysRoot, "kernel", "tracing", "uprobe_events"),
		filepath.Join(env.SysRoot, "kernel", "debug", "tracing", "uprobe_events"),
	} {
		if env.Exists(p) {
			found = p
			break
		}
	}
	switch {
	case found == "":
		up.Status, up.Detail = statusFail, "no uprobe PMU and no tracefs uprobe_events"
		up.Fix = "enable CONFIG_UPROBE_EVENTS in the kernel, or mount tracefs"
	case !privileged:
		up.Status, up.Detail = statusSkip, "found "+found+"; loading test programs needs privileges"
	default:
		if err := env.ProbeSupported(); err != nil {
			up.Status, up.Detail = statusFail, err.Error()
			up.Fix = "the CUDA probe needs uprobe programs, ring buffers and bpf_get_attach_cookie (Linux 5.15+)"
		} else {
			up.Status, up.Detail = statusOK, "uprobe programs, ring buffers and attach cookies load ("+found+")"
		}
	}
	return []DoctorCheck{priv, kern, btf, up}
}

// effectiveCaps reads CapEff from a /proc/PID/status file.
func effectiveCaps(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("read capabilities: %s: CapEff %q is not hex", path, strings.TrimSpace(v))
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("read capabilities: %s has no CapEff line", path)
}

// kernelVersion parses "6.18.44-fc-v857" → 6, 18.
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	digits := parts[1]
	for i, r := range digits {
		if r < '0' || r > '9' {
			digits = digits[:i]
			break
		}
	}
	minor, err2 := strconv.Atoi(digits)
	return major, minor, err1 == nil && err2 == nil
}

func libcudaCheck(env DoctorEnv) DoctorCheck {
	c := DoctorCheck{Name: "libcuda", Group: "libcuda"}
	ld, err := env.Ldconfig()
	if err != nil {
		ld = ""
	}
	if p := cudaprobe.SearchLibcuda(ld, cudaprobe.CommonLibcudaPaths, env.Exists); p != "" {
		c.Status, c.Detail = statusOK, cmdutil.Quote(p)
		return c
	}
	c.Status, c.Detail = statusWarn, "libcuda.so.1 not in the linker cache or the usual paths"
	c.Fix = "install the NVIDIA driver; for a library elsewhere (a container) use `kvcanary probe cuda --pid PID` or --lib PATH"
	return c
}

func socketCheck(ctx context.Context, env DoctorEnv, socket string) DoctorCheck {
	c := DoctorCheck{Name: "collector", Group: "socket"}
	if socket == "" {
		c.Status, c.Detail = statusSkip, "no --socket given"
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := env.Dial(ctx, socket); err != nil {
		c.Status, c.Detail = statusFail, fmt.Sprintf("%s: %v", cmdutil.Quote(socket), err)
		listen := socket
		if !strings.Contains(listen, "://") {
			listen = "unix://" + listen
		}
		c.Fix = "start it with `kvcanary collect --listen " + cmdutil.Quote(listen) + "`, or check the path and its permissions"
		return c
	}
	c.Status, c.Detail = statusOK, cmdutil.Quote(socket)+" accepts connections"
	return c
}

type engineProc struct {
	pid    int
	engine string
	cuda   bool
}

func engineCheck(env DoctorEnv) DoctorCheck {
	c := DoctorCheck{Name: "engines", Group: "engine"}
	procs, err := scanEngines(env)
	if err != nil {
		c.Status, c.Detail = statusWarn, err.Error()
		return c
	}
	if len(procs) == 0 {
		c.Status, c.Detail = statusWarn, "no SGLang or vLLM process found"
		c.Fix = "start the engine on this host (or check from inside its container); `kvcanary sim` runs the twin"
		return c
	}
	parts := make([]string, 0, len(procs))
	for _, p := range procs {
		s := fmt.Sprintf("pid %d %s", p.pid, p.engine)
		if p.cuda {
			s += " (maps libcuda)"
		}
		parts = append(parts, s)
	}
	const show = 6
	if len(parts) > show {
		parts = append(parts[:show], fmt.Sprintf("… %d more", len(procs)-show))
	}
	c.Status, c.Detail = statusOK, strings.Join(parts, "; ")
	return c
}

// scanEngines lists processes whose command line mentions sglang or vllm.
func scanEngines(env DoctorEnv) ([]engineProc, error) {
	ents, err := os.ReadDir(env.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	var out []engineProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == env.Self {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(env.ProcRoot, e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue // exited, or a kernel thread
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		line := strings.ToLower(strings.Join(args, " "))
		engine := ""
		switch {
		case strings.Contains(line, "sglang"):
			engine = "sglang"
		case strings.Contains(line, "vllm"):
			engine = "vllm"
		default:
			continue
		}
		_, ferr := cudaprobe.FindLibcuda(env.ProcRoot, pid)
		out = append(out, engineProc{pid: pid, engine: engine, cuda: ferr == nil})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out, nil
}

// SGLangCheck is what `python3 -m kvcanary.sglang check --json` prints.
type SGLangCheck struct {
	SGLangVersion string         `json:"sglang_version"`
	Targets       []SGLangTarget `json:"targets"`
}

// SGLangTarget is one hook target of the binding's table, resolved against
// the installed SGLang.
type SGLangTarget struct {
	Target      string   `json:"target"`
	Hook        string   `json:"hook"`
	Instruments []string `json:"instruments"`
	OK          bool     `json:"ok"`
	Error       string   `json:"error,omitempty"`
}

// sglangCheckTimeout bounds both Python runs: importing SGLang imports torch.
const sglangCheckTimeout = 2 * time.Minute

// sglangChecks is the sglang section: one summary line, then one line per
// hook target. The check itself is the Python binding's; doctor runs it with
// the embedded package on PYTHONPATH and shows its answer.
func sglangChecks(ctx context.Context, env DoctorEnv, python string) []DoctorCheck {
	head := DoctorCheck{Name: "sglang", Group: "sglang"}
	from := "--python"
	if python == "" {
		python, from = env.Getenv("KVCANARY_PYTHON"), "KVCANARY_PYTHON"
	}
	if python == "" {
		python, from = "python3", "PATH"
	}
	py, err := env.LookPath(python)
	if err != nil {
		if from == "PATH" {
			head.Status, head.Detail = statusSkip, "no python3 on PATH (name the engine's with --python or KVCANARY_PYTHON)"
			return []DoctorCheck{head}
		}
		head.Status, head.Detail = statusWarn, fmt.Sprintf("%s %s: %v", from, cmdutil.Quote(python), err)
		head.Fix = "name the Python interpreter SGLang runs in"
		return []DoctorCheck{head}
	}
	ctx, cancel := context.WithTimeout(ctx, sglangCheckTimeout)
	defer cancel()
	// find_spec locates the package without importing it (and torch).
	_, stderr, code, err := runPython(ctx, py, env.Environ(), "-c",
		"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('sglang') else 4)")
	if err != nil || code != 0 {
		head.Status, head.Detail = statusWarn, fmt.Sprintf("sglang is not importable by %s%s", cmdutil.Quote(py), pythonWhy(err, code, stderr, 4))
		head.Fix = "install SGLang in this interpreter, or name the engine's with --python or KVCANARY_PYTHON"
		return []DoctorCheck{head}
	}
	dir, err := env.PyhookPath()
	if err != nil {
		head.Status, head.Detail = statusWarn, err.Error()
		head.Fix = "kvcanary extracts its Python package into the user cache: set XDG_CACHE_HOME to a writable directory"
		return []DoctorCheck{head}
	}
	stdout, stderr, code, err := runPython(ctx, py, prependPythonPath(env.Environ(), dir), "-m", "kvcanary.sglang", "check", "--json")
	var res SGLangCheck
	if err == nil && code == 3 {
		head.Status, head.Detail = statusWarn, fmt.Sprintf("sglang is found by %s but does not import%s", cmdutil.Quote(py), pythonWhy(nil, code, stderr, -1))
		head.Fix = "run python3 -c 'import sglang' in the engine's environment to see why"
		return []DoctorCheck{head}
	}
	if jerr := json.Unmarshal(stdout, &res); err != nil || jerr != nil || len(res.Targets) == 0 {
		why := pythonWhy(err, code, stderr, -1)
		if err == nil && jerr != nil {
			why = fmt.Sprintf(" (exit %d; output is not the check's JSON: %v)%s", code, jerr, lastLine(stderr))
		} else if err == nil {
			why = fmt.Sprintf(" (exit %d; no targets in its JSON)", code)
		}
		head.Status, head.Detail = statusWarn, "kvcanary.sglang check failed"+why
		head.Fix = "run " + cmdutil.Quote(py) + " -m kvcanary.sglang check with PYTHONPATH=$(kvcanary pyhook path) to see why"
		return []DoctorCheck{head}
	}
	ok := 0
	off := map[string]bool{}
	lines := make([]DoctorCheck, 0, len(res.Targets))
	for i := range res.Targets {
		t := res.Targets[i]
		line := DoctorCheck{Name: "sglang target", Status: statusOK, Target: &t,
			Detail: fmt.Sprintf("%s %s → %s", cmdutil.Quote(t.Target), cmdutil.Quote(t.Hook), cmdutil.Quote(strings.Join(t.Instruments, ",")))}
		if len(t.Instruments) == 0 {
			line.Detail = cmdutil.Quote(t.Target) + " (read, not hooked)"
		}
		if t.OK {
			ok++
		} else {
			line.Status = statusWarn
			line.Detail += ": missing"
			if t.Error != "" {
				line.Detail += ": " + cmdutil.Quote(t.Error)
			}
			for _, in := range t.Instruments {
				off[in] = true
			}
		}
		lines = append(lines, line)
	}
	version := res.SGLangVersion
	if version == "" {
		version = "version unknown"
	}
	head.Status = statusOK
	head.Detail = fmt.Sprintf("SGLang %s in %s: %d of %d hook targets resolve", cmdutil.Quote(version), cmdutil.Quote(py), ok, len(res.Targets))
	if len(off) > 0 {
		names := make([]string, 0, len(off))
		for in := range off {
			names = append(names, cmdutil.Quote(in))
		}
		sort.Strings(names)
		head.Status = statusWarn
		head.Detail += "; instruments that need a missing one stay off: " + strings.Join(names, ", ")
		head.Fix = "this SGLang moved a hook target kvcanary knows: the other instruments still work; report the version with this output"
	}
	return append([]DoctorCheck{head}, lines...)
}

// runPython runs py with args and env; code is the exit code (-1 when it
// did not exit normally), err a failure to run it at all or the timeout.
func runPython(ctx context.Context, py string, env []string, args ...string) (stdout, stderr []byte, code int, err error) {
	var out, errb strings.Builder
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("no answer within %s", sglangCheckTimeout)
	}
	code = -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	return []byte(out.String()), []byte(errb.String()), code, err
}

// pythonWhy says why a Python run did not give the answer wanted: the
// failure to run it, or its exit code and last stderr line (quiet is an
// exit code that needs no explanation).
func pythonWhy(err error, code int, stderr []byte, quiet int) string {
	switch {
	case err != nil:
		return ": " + cmdutil.Quote(err.Error())
	case code == quiet:
		return ""
	}
	return fmt.Sprintf(" (exit %d)%s", code, lastLine(stderr))
}

// lastLine is ": <the last non-empty line>" of b, quoted, or "".
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return ": " + cmdutil.Quote(l)
	}
	return ""
}

// prependPythonPath puts dir first on env's PYTHONPATH, keeping the entries
// already there after it.
func prependPythonPath(env []string, dir string) []string {
	out := make([]string, 0, len(env)+1)
	pp := dir
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok {
			if v != "" {
				pp = dir + string(os.PathListSeparator) + v
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PYTHONPATH="+pp)
}
