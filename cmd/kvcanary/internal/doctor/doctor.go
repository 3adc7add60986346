package doctor

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"

	"github.com/kvcanary/kvcanary/runtime/cudaprobe"
	"github.com/kvcanary/kvcanary/runtime/gpu"
	"github.com/kvcanary/kvcanary/runtime/pyhook"
)

// Doctor check statuses.
const (
	StatusOK   = "ok"
	StatusWarn = "warn"
	StatusFail = "fail"
	StatusSkip = "skip"
)

// Doctor check groups, the names --require takes.
var Groups = []string{"gpu", "ebpf", "libcuda", "socket", "engine", "sglang"}

// Check is one line of `kvcanary doctor`.
type Check struct {
	Name   string `json:"name"`
	Group  string `json:"group,omitempty"` // what --require names; empty for informational lines
	Status string `json:"status"`          // ok | warn | fail | skip
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"` // what to do when not ok
	// Target is the hook target of a "sglang target" line, as
	// kvcanary.sglang check reported it.
	Target *SGLangTarget `json:"target,omitempty"`
}

// Report is the --json shape of `kvcanary doctor`.
type Report struct {
	Checks   []Check  `json:"checks"`
	Required []string `json:"required,omitempty"`
	Failed   []string `json:"failed,omitempty"` // required groups that did not pass
}

// Env is the outside world doctor inspects; tests replace each piece.
type Env struct {
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

// SystemEnv is this host.
func SystemEnv() Env {
	return Env{
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

// Checks runs every check in report order; socket is the collector to dial
// ("" skips it) and python the engine's interpreter ("" for the default).
func Checks(ctx context.Context, env Env, socket, python string) []Check {
	var cs []Check
	cs = append(cs, gpuChecks(env)...)
	cs = append(cs, ebpfChecks(env)...)
	cs = append(cs, libcudaCheck(env))
	cs = append(cs, socketCheck(ctx, env, socket))
	cs = append(cs, engineCheck(env))
	cs = append(cs, sglangChecks(ctx, env, python)...)
	return cs
}

// NewReport judges checks against the required groups (plus "socket" when
// a socket was given): a required group fails unless all its checks are
// ok — a check that could not run (skip) did not pass either.
func NewReport(checks []Check, require []string, socket string) Report {
	rep := Report{Checks: checks}
	required := append([]string(nil), require...)
	if socket != "" && !slices.Contains(required, "socket") {
		required = append(required, "socket")
	}
	sort.Strings(required)
	rep.Required = required
	for _, g := range required {
		for _, c := range rep.Checks {
			if c.Group == g && c.Status != StatusOK {
				rep.Failed = append(rep.Failed, g)
				break
			}
		}
	}
	return rep
}

// WriteText prints the report on one screen: a line per check, the fix
// under each that is not ok, the failed required groups last.
func WriteText(w io.Writer, rep Report) error {
	width := 0
	for _, c := range rep.Checks {
		width = max(width, len(c.Name))
	}
	for _, c := range rep.Checks {
		fmt.Fprintf(w, "%-4s  %-*s  %s\n", c.Status, width, c.Name, c.Detail)
		if c.Fix != "" && c.Status != StatusOK {
			fmt.Fprintf(w, "      %*s  → %s\n", width, "", c.Fix)
		}
	}
	if len(rep.Failed) > 0 {
		_, err := fmt.Fprintf(w, "required checks failed: %s\n", strings.Join(rep.Failed, ", "))
		return err
	}
	return nil
}
