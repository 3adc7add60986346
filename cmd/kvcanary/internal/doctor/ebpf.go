package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvcanary/kvcanary/internal/safetext"
)

// Linux capability bits.
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// ebpfChecks is the ebpf section: privileges, kernel version, BTF and
// uprobe support, what `kvcanary probe cuda` needs.
func ebpfChecks(env Env) []Check {
	priv, privileged := privilegesCheck(env)
	return []Check{priv, kernelCheck(env), btfCheck(env), uprobesCheck(env, privileged)}
}

// privilegesCheck reads the effective capabilities; privileged says the
// process may load eBPF programs (CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON).
func privilegesCheck(env Env) (c Check, privileged bool) {
	c = Check{Name: "privileges", Group: "ebpf"}
	capEff, err := effectiveCaps(filepath.Join(env.ProcRoot, "self", "status"))
	has := func(bit uint) bool { return capEff&(1<<bit) != 0 }
	privileged = err == nil && (has(capSysAdmin) || (has(capBPF) && has(capPerfmon)))
	switch {
	case err != nil:
		c.Status, c.Detail = StatusWarn, err.Error()
	case privileged:
		c.Status = StatusOK
		c.Detail = "CAP_BPF and CAP_PERFMON effective"
		if has(capSysAdmin) {
			c.Detail = "CAP_SYS_ADMIN effective (root)"
		}
	default:
		c.Status, c.Detail = StatusFail, fmt.Sprintf("effective capabilities %#x lack CAP_BPF and CAP_PERFMON", capEff)
	}
	if c.Status != StatusOK {
		c.Fix = "run as root or grant CAP_BPF and CAP_PERFMON (e.g. sudo setcap cap_bpf,cap_perfmon+ep $(which kvcanary))"
	}
	return c, privileged
}

// kernelCheck wants Linux 5.15+ (uprobe attach cookies).
func kernelCheck(env Env) Check {
	kern := Check{Name: "kernel", Group: "ebpf"}
	rel, err := os.ReadFile(filepath.Join(env.ProcRoot, "sys", "kernel", "osrelease"))
	release := strings.TrimSpace(string(rel))
	switch major, minor, ok := kernelVersion(release); {
	case err != nil:
		kern.Status, kern.Detail = StatusWarn, fmt.Sprintf("cannot read kernel release: %v", err)
	case !ok:
		kern.Status, kern.Detail = StatusWarn, fmt.Sprintf("cannot parse kernel release %s", safetext.Quote(release))
	case major > 5 || (major == 5 && minor >= 15):
		kern.Status, kern.Detail = StatusOK, "Linux "+safetext.Quote(release)+" (uprobe attach cookies need 5.15+)"
	default:
		kern.Status, kern.Detail = StatusFail, "Linux "+safetext.Quote(release)+" is older than 5.15"
		kern.Fix = "the CUDA probe needs bpf_get_attach_cookie (Linux 5.15+): upgrade the kernel"
	}
	return kern
}

// btfCheck is informational: the CUDA probe does not need BTF.
func btfCheck(env Env) Check {
	btf := Check{Name: "BTF", Status: StatusOK}
	btfPath := filepath.Join(env.SysRoot, "kernel", "btf", "vmlinux")
	if env.Exists(btfPath) {
		btf.Detail = btfPath + " present"
	} else {
		btf.Status, btf.Detail = StatusWarn, btfPath+" missing (the CUDA probe does not need it; other eBPF tools may)"
		btf.Fix = "enable CONFIG_DEBUG_INFO_BTF in the kernel if other tools need it"
	}
	return btf
}

// uprobesCheck finds uprobe support and, with privileges, loads the
// probe's test programs.
func uprobesCheck(env Env, privileged bool) Check {
	up := Check{Name: "uprobes", Group: "ebpf"}
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
		up.Status, up.Detail = StatusFail, "no uprobe PMU and no tracefs uprobe_events"
		up.Fix = "enable CONFIG_UPROBE_EVENTS in the kernel, or mount tracefs"
	case !privileged:
		up.Status, up.Detail = StatusSkip, "found "+found+"; loading test programs needs privileges"
	default:
		if err := env.ProbeSupported(); err != nil {
			up.Status, up.Detail = StatusFail, err.Error()
			up.Fix = "the CUDA probe needs uprobe programs, ring buffers and bpf_get_attach_cookie (Linux 5.15+)"
		} else {
			up.Status, up.Detail = StatusOK, "uprobe programs, ring buffers and attach cookies load ("+found+")"
		}
	}
	return up
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
