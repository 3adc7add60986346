package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlock returns the commands of the first ```sh block after the
// README heading: comment and blank lines dropped, continuation lines joined.
func readmeBlock(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no heading %q", heading)
	}
	_, sec, ok = strings.Cut(sec, "```sh\n")
	block, _, closed := strings.Cut(sec, "\n```")
	if !ok || !closed {
		t.Fatalf("README.md: no ```sh block under %q", heading)
	}
	var cmds []string
	cur := ""
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimSpace(l)
		if cur == "" && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		cmds = append(cmds, cur+l)
		cur = ""
	}
	return cmds
}

// startTwinServer runs `kvcanary sim serve` on a free port with args and
// returns its URL; it is stopped (its process group) when the test ends.
func startTwinServer(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"sim", "serve", "--addr", "127.0.0.1:0", "--step-time", "2ms"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		cmd.Wait()
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
				urls <- strings.Fields(rest)[0]
			}
		}
	}()
	select {
	case u := <-urls:
		return u
	case <-time.After(60 * time.Second):
		t.Fatal("sim serve did not say where it listens in 60s")
	}
	return ""
}

// readmePlan is sglang.toml for the test: examples/seeds-serve.toml's form
// (each arm a `kvcanary sim serve` process), one arm, a small budget.
const readmePlan = `[server]
engine = "command"
command = "{self} sim serve --addr 127.0.0.1:{port} --step-time 2ms {flags}"
startup_timeout = "60s"
stop_grace = "10s"
[baseline]
flags = []
[[arm]]
name = "overlap-off"
flags = ["--multi-stream-overlap=false"]
[workload]
rounds = 2
concurrency = 8
seed = 1
tool_time = "0s"
[stats]
budget = 16
batch = 8
baseline_start = 8
`

// TestReadmeFirstTenMinutes runs every command of the README's "First 10
// minutes on your SGLang host" block, in order, in one directory, through
// bash as a user would, with this machine's stand-ins for a GPU host:
//   - the server at http://127.0.0.1:30000 is the twin behind `kvcanary sim
//     serve`; the run labelled multi_stream_overlap=off goes to a second one
//     started with --multi-stream-overlap=false (the restart with one flag
//     changed);
//   - `python3 -m sglang.launch_server --disaggregation-mode ROLE ...` is the
//     SGLang stand-in (runtime/pyhook/tests/standin/engine.py, CPU torch),
//     whose sglang package is on PYTHONPATH, so doctor and wrap find SGLang's
//     hook targets in it. The stand-in runs prefill and decode in one
//     launcher, so each "host" records both roles, and checksum compare counts
//     the repeated digests once;
//   - `--sessions 80 --rounds 4` becomes 8 sessions of 2 rounds without tool
//     time, and the stand-in's short run samples every step
//     (KVCANARY_CANARY_EVERY=1, KVCANARY_GRAPHDIFF_EVERY=1), as the defaults
//     do over a real run's many steps;
//   - sglang.toml is readmePlan.
//
// A clean engine and a report: every command exits 0, and each prints its
// decisive line. The commands run as subprocesses of a separately built
// binary, so the race detector has nothing to watch here: skipped under
// -race (and -short).
func TestReadmeFirstTenMinutes(t *testing.T) {
	if raceEnabled {
		t.Skip("runs the kvcanary binary in subprocesses: nothing for -race to see")
	}
	t.Parallel() // its own directory, servers on free ports, the environment per command
	engine, err := filepath.Abs("../../runtime/pyhook/tests/standin/engine.py")
	if err != nil {
		t.Fatal(err)
	}
	const py = "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch (Debian's python3-torch), which the SGLang stand-in needs: %v %s", py, err, out)
	}
	cmds := readmeBlock(t, "## First 10 minutes on your SGLang host")
	bin := kvcanaryBinary(t)

	// The steps the section promises, in order: doctor → repro → wrap on
	// both PD hosts → the three judgements → ab / bisect.
	var steps []string
	for _, c := range cmds {
		f := strings.Fields(c)
		if len(f) < 2 || f[0] != "kvcanary" {
			t.Fatalf("README command %q does not start with kvcanary", c)
		}
		steps = append(steps, strings.Join(f[1:min(3, len(f))], " "))
	}
	want := "doctor --python|repro --url|wrap --record|wrap --record|repro --url|checksum compare|canary report|graphdiff report|repro --url|ab base.kvtrace|bisect sglang.toml"
	if got := strings.Join(steps, "|"); got != want {
		t.Fatalf("the README's first-10-minutes steps are\n  %s\nwant\n  %s", got, want)
	}

	dir := t.TempDir()
	pathDir := filepath.Join(dir, "path")
	work := filepath.Join(dir, "work")
	for _, d := range []string{pathDir, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// `kvcanary` and `python3` on PATH are the binary under test and the
	// Python with torch.
	for name, target := range map[string]string{"kvcanary": bin, "python3": py} {
		if err := os.Symlink(target, filepath.Join(pathDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "sglang.toml"), []byte(readmePlan), 0o644); err != nil {
		t.Fatal(err)
	}
	base := startTwinServer(t, bin)
	noOverlap := startTwinServer(t, bin, "--multi-stream-overlap=false")
	env := []string{"PATH=" + pathDir + ":" + os.Getenv("PATH"), "HOME=" + dir, "XDG_STATE_HOME=" + dir,
		"PYTHONPATH=" + filepath.Dir(engine), "PYTHONDONTWRITEBYTECODE=1", "KVCANARY_CANARY_EVERY=1", "KVCANARY_GRAPHDIFF_EVERY=1"}

	launch := regexp.MustCompile(`python3 -m sglang\.launch_server --disaggregation-mode (prefill|decode) \.\.\.$`)
	for _, c := range cmds {
		run := c
		if strings.Contains(run, "--label multi_stream_overlap=off") {
			run = strings.ReplaceAll(run, "http://127.0.0.1:30000", noOverlap)
		}
		run = strings.ReplaceAll(run, "http://127.0.0.1:30000", base)
		run = strings.ReplaceAll(run, "--sessions 80 --rounds 4", "--sessions 8 --rounds 2 --tool-time 0")
		if strings.HasPrefix(c, "kvcanary wrap ") {
			if !launch.MatchString(run) {
				t.Fatalf("README wrap command %q: no SGLang launch command the stand-in can stand for", c)
			}
			run = launch.ReplaceAllString(run, "python3 "+engine+" --quiet --requests 4 --decode-steps 3")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", run)
		cmd.Dir, cmd.Env = work, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("README command %q (run as %q): %v\n%s", c, run, err, out.String())
		}
		// The decisive lines of each step.
		var decisive []string
		switch f := strings.Fields(c); f[1] {
		case "doctor":
			decisive = []string{`(?m)^ok +sglang +SGLang .*: (\d+) of \d+ hook targets resolve`}
		case "repro":
			decisive = []string{`(?m)^CORRUPTION sessions: \d+/8 = `, `(?m)^preflight: ok `}
		case "wrap":
			decisive = []string{`wrap: recorded \d+ events to (prefill|decode)\.kvtrace`, `(?m)^transfer \(checksum\) +ok `,
				`(?m)^buffer \(canary\) +ok `, `(?m)^compute \(graphdiff\) +ok `}
		case "checksum":
			decisive = []string{`(?m)^\d+/\d+ rooms match`}
		case "canary":
			decisive = []string{`(?m)^LIVE-PAGE-OVERWRITE hits: 0 in \d+ replays`}
		case "graphdiff":
			decisive = []string{`(?m)^graph = eager within tolerance: 0/\d+ samples diverge`}
		case "ab":
			decisive = []string{`Fisher exact test`, `flag under test: multi_stream_overlap +true -> false`}
		case "bisect":
			decisive = []string{`(?m)^verdict: .*overlap-off`}
		}
		for _, d := range decisive {
			if !regexp.MustCompile(d).MatchString(out.String()) {
				t.Errorf("README command %q (run as %q): output lacks %s:\n%s", c, run, d, out.String())
			}
		}
	}
	for _, f := range []string{"base.kvtrace", "prefill.kvtrace", "decode.kvtrace", "sessions.kvtrace", "nooverlap.kvtrace"} {
		if _, err := os.Stat(filepath.Join(work, f)); err != nil {
			t.Errorf("the README's commands left no %s: %v", f, err)
		}
	}
}

// TestRootExamplesNameTheRealHostPath: `kvcanary --help` shows the first
// steps on an SGLang host (doctor, repro, wrap, a judgement) beside the
// twin's, and every example names a command that exists.
func TestRootExamplesNameTheRealHostPath(t *testing.T) {
	root := NewCmdRoot(newTestCLI().F)
	for _, w := range []string{"kvcanary doctor", "kvcanary repro --url", "kvcanary wrap --record", "kvcanary checksum compare", "kvcanary demo"} {
		if !strings.Contains(root.Example, w) {
			t.Errorf("root examples lack %q:\n%s", w, root.Example)
		}
	}
	for _, l := range strings.Split(root.Example, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "kvcanary" || strings.HasPrefix(f[1], "<") {
			continue
		}
		if c, _, err := root.Find(f[1:]); err != nil || c == root {
			t.Errorf("root example %q names no command: %v", l, err)
		}
	}
}
