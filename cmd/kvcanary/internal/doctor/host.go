package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/internal/safetext"
	"github.com/kvcanary/kvcanary/runtime/cudaprobe"
)

func libcudaCheck(env Env) Check {
	c := Check{Name: "libcuda", Group: "libcuda"}
	ld, err := env.Ldconfig()
	if err != nil {
		ld = ""
	}
	if p := cudaprobe.SearchLibcuda(ld, cudaprobe.CommonLibcudaPaths, env.Exists); p != "" {
		c.Status, c.Detail = StatusOK, safetext.Quote(p)
		return c
	}
	c.Status, c.Detail = StatusWarn, "libcuda.so.1 not in the linker cache or the usual paths"
	c.Fix = "install the NVIDIA driver; for a library elsewhere (a container) use `kvcanary probe cuda --pid PID` or --lib PATH"
	return c
}

func socketCheck(ctx context.Context, env Env, socket string) Check {
	c := Check{Name: "collector", Group: "socket"}
	if socket == "" {
		c.Status, c.Detail = StatusSkip, "no --socket given"
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := env.Dial(ctx, socket); err != nil {
		c.Status, c.Detail = StatusFail, fmt.Sprintf("%s: %v", safetext.Quote(socket), err)
		listen := socket
		if !strings.Contains(listen, "://") {
			listen = "unix://" + listen
		}
		c.Fix = "start it with `kvcanary collect --listen " + safetext.Quote(listen) + "`, or check the path and its permissions"
		return c
	}
	c.Status, c.Detail = StatusOK, safetext.Quote(socket)+" accepts connections"
	return c
}

type engineProc struct {
	pid    int
	engine string
	cuda   bool
}

func engineCheck(env Env) Check {
	c := Check{Name: "engines", Group: "engine"}
	procs, err := scanEngines(env)
	if err != nil {
		c.Status, c.Detail = StatusWarn, err.Error()
		return c
	}
	if len(procs) == 0 {
		c.Status, c.Detail = StatusWarn, "no SGLang or vLLM process found"
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
	c.Status, c.Detail = StatusOK, strings.Join(parts, "; ")
	return c
}

// scanEngines lists processes whose command line mentions sglang or vllm.
func scanEngines(env Env) ([]engineProc, error) {
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
