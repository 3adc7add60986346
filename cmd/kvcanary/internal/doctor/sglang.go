package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/internal/safetext"
	"github.com/kvcanary/kvcanary/runtime/pyhook"
)

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
func sglangChecks(ctx context.Context, env Env, python string) []Check {
	head := Check{Name: "sglang", Group: "sglang"}
	py, ok := findPython(env, python, &head)
	if !ok {
		return []Check{head}
	}
	ctx, cancel := context.WithTimeout(ctx, sglangCheckTimeout)
	defer cancel()
	res, ok := runSGLangCheck(ctx, env, py, &head)
	if !ok {
		return []Check{head}
	}
	return targetChecks(res, py, head)
}

// findPython resolves the interpreter: --python, else $KVCANARY_PYTHON,
// else python3 on PATH. When it cannot, head says why and ok is false.
func findPython(env Env, python string, head *Check) (py string, ok bool) {
	from := "--python"
	if python == "" {
		python, from = env.Getenv("KVCANARY_PYTHON"), "KVCANARY_PYTHON"
	}
	if python == "" {
		python, from = "python3", "PATH"
	}
	py, err := env.LookPath(python)
	if err == nil {
		return py, true
	}
	if from == "PATH" {
		head.Status, head.Detail = StatusSkip, "no python3 on PATH (name the engine's with --python or KVCANARY_PYTHON)"
		return "", false
	}
	head.Status, head.Detail = StatusWarn, fmt.Sprintf("%s %s: %v", from, safetext.Quote(python), err)
	head.Fix = "name the Python interpreter SGLang runs in"
	return "", false
}

// runSGLangCheck asks py whether it has sglang, then runs the binding's
// check with the embedded package on PYTHONPATH. When there is no answer,
// head says why and ok is false.
func runSGLangCheck(ctx context.Context, env Env, py string, head *Check) (res SGLangCheck, ok bool) {
	// find_spec locates the package without importing it (and torch).
	_, stderr, code, err := runPython(ctx, py, env.Environ(), "-c",
		"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('sglang') else 4)")
	if err != nil || code != 0 {
		head.Status, head.Detail = StatusWarn, fmt.Sprintf("sglang is not importable by %s%s", safetext.Quote(py), pythonWhy(err, code, stderr, 4))
		head.Fix = "install SGLang in this interpreter, or name the engine's with --python or KVCANARY_PYTHON"
		return res, false
	}
	dir, err := env.PyhookPath()
	if err != nil {
		head.Status, head.Detail = StatusWarn, err.Error()
		head.Fix = "kvcanary extracts its Python package into the user cache: set XDG_CACHE_HOME to a writable directory"
		return res, false
	}
	stdout, stderr, code, err := runPython(ctx, py, pyhook.WithPythonPath(env.Environ(), dir), "-m", "kvcanary.sglang", "check", "--json")
	if err == nil && code == 3 {
		head.Status, head.Detail = StatusWarn, fmt.Sprintf("sglang is found by %s but does not import%s", safetext.Quote(py), pythonWhy(nil, code, stderr, -1))
		head.Fix = "run python3 -c 'import sglang' in the engine's environment to see why"
		return res, false
	}
	if jerr := json.Unmarshal(stdout, &res); err != nil || jerr != nil || len(res.Targets) == 0 {
		why := pythonWhy(err, code, stderr, -1)
		if err == nil && jerr != nil {
			why = fmt.Sprintf(" (exit %d; output is not the check's JSON: %v)%s", code, jerr, lastLine(stderr))
		} else if err == nil {
			why = fmt.Sprintf(" (exit %d; no targets in its JSON)", code)
		}
		head.Status, head.Detail = StatusWarn, "kvcanary.sglang check failed"+why
		head.Fix = "run " + safetext.Quote(py) + " -m kvcanary.sglang check with PYTHONPATH=$(kvcanary pyhook path) to see why"
		return res, false
	}
	return res, true
}

// targetChecks is the summary line head then one line per hook target of
// the check's answer.
func targetChecks(res SGLangCheck, py string, head Check) []Check {
	ok := 0
	off := map[string]bool{}
	lines := make([]Check, 0, len(res.Targets))
	for i := range res.Targets {
		t := res.Targets[i]
		line := Check{Name: "sglang target", Status: StatusOK, Target: &t,
			Detail: fmt.Sprintf("%s %s → %s", safetext.Quote(t.Target), safetext.Quote(t.Hook), safetext.Quote(strings.Join(t.Instruments, ",")))}
		if len(t.Instruments) == 0 {
			line.Detail = safetext.Quote(t.Target) + " (read, not hooked)"
		}
		if t.OK {
			ok++
		} else {
			line.Status = StatusWarn
			line.Detail += ": missing"
			if t.Error != "" {
				line.Detail += ": " + safetext.Quote(t.Error)
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
	head.Status = StatusOK
	head.Detail = fmt.Sprintf("SGLang %s in %s: %d of %d hook targets resolve", safetext.Quote(version), safetext.Quote(py), ok, len(res.Targets))
	if len(off) > 0 {
		names := make([]string, 0, len(off))
		for in := range off {
			names = append(names, safetext.Quote(in))
		}
		sort.Strings(names)
		head.Status = StatusWarn
		head.Detail += "; instruments that need a missing one stay off: " + strings.Join(names, ", ")
		head.Fix = "this SGLang moved a hook target kvcanary knows: the other instruments still work; report the version with this output"
	}
	return append([]Check{head}, lines...)
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
		return ": " + safetext.Quote(err.Error())
	case code == quiet:
		return ""
	}
	return fmt.Sprintf(" (exit %d)%s", code, lastLine(stderr))
}

// lastLine is ": <the last non-empty line>" of b, quoted, or "".
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return ": " + safetext.Quote(l)
	}
	return ""
}
