package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/bisect"
)

func runBisect(t *testing.T, ctx context.Context, args ...string) (string, string, error) {
	t.Helper()
	c := newTestCLI()
	c.F.Ctx = ctx
	err := c.exec(NewCmdBisect(c.F, nil), args...)
	return c.Out.String(), c.ErrOut.String(), err
}

// TestBisectSeedsOnTheTwin runs the shipped plan in process: the seeds'
// decisions (fp8, no graphs and overlap off remove it; max-bs 64 changes
// nothing) with fewer sessions per arm than the demo's 80.
func TestBisectSeedsOnTheTwin(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("runs the seeds' plan on the twin (about 30 twin runs of 80 sessions); skipped with -short and -race")
	}
	// The package's longest test, CPU-bound: in parallel it overlaps the
	// tests that wait on processes instead of adding to them.
	t.Parallel()
	out, stderr, err := runBisect(t, context.Background(), "../../examples/seeds.toml", "--out", t.TempDir(), "--json")
	if err != nil {
		t.Fatalf("bisect: %v\n%s", err, stderr)
	}
	var rep bisect.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	v := rep.Verdict
	if strings.Join(v.Removes, ",") != "fp8,no-graph,overlap-off" || strings.Join(v.Nothing, ",") != "max-bs-64" || !rep.Complete {
		t.Fatalf("verdict %+v\n%s", v, stderr)
	}
	armSessions := rep.Sessions - rep.Arms[0].Sessions
	mean := float64(armSessions) / float64(len(rep.Arms)-1)
	t.Logf("sessions: %d counted, baseline %d, arms %.1f on average (demo: 80 each)", rep.Sessions, rep.Arms[0].Sessions, mean)
	if mean >= 80 {
		t.Errorf("arms ran %.1f sessions on average, want fewer than the demo's 80", mean)
	}
}

// serveWrapper is the command of the process tests: kvcanary sim serve,
// except that an arm with --max-running-requests=7 has its server killed
// 0.6 s after it says it listens (a server that dies mid-arm), leaving
// behind a child that holds its output open (a worker that outlives the
// server). The kill is timed from "listening", not from the start: the
// bisect sees the server healthy within one 200 ms health poll, and no
// session can finish before its 1 s tool time, so the kill lands between
// the two on a loaded machine too. (Timed from the start, a fast machine
// finished the arm's first 8 sessions and decided it before the kill.)
const serveWrapper = `#!/bin/sh
self="$1"; port="$2"; shift 2
case " $* " in
*" --max-running-requests=7 "*)
	sleep 313 &
	log="$(mktemp)"
	"$self" sim serve --addr "127.0.0.1:$port" --step-time 2ms --run "bisect-test:$0" "$@" 2>"$log" &
	pid=$!
	until grep -q "listening on" "$log"; do
		kill -0 $pid 2>/dev/null || break
		sleep 0.02
	done
	cat "$log" >&2
	sleep 0.6
	kill -9 $pid
	wait $pid
	rm -f "$log"
	exit 137 ;;
esac
exec "$self" sim serve --addr "127.0.0.1:$port" --step-time 2ms --run "bisect-test:$0" "$@"
`

func writeProcessPlan(t *testing.T, dir string, arms string) string {
	t.Helper()
	wrapper := filepath.Join(dir, "serve.sh")
	if err := os.WriteFile(wrapper, []byte(serveWrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	plan := `[server]
engine = "command"
command = "` + wrapper + ` {self} {port} {flags}"
startup_timeout = "30s"
stop_grace = "5s"
[workload]
rounds = 2
concurrency = 8
tool_time = "1s"
[stats]
budget = 16
batch = 8
baseline_start = 8
` + arms
	path := filepath.Join(dir, "plan.toml")
	if err := os.WriteFile(path, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// bisectJSON runs the kvcanary binary bin as `bisect ARGS... --json` and
// returns its report and stderr; a failed run or a report that does not
// decode fails t.
func bisectJSON(t *testing.T, bin string, args ...string) (bisect.Report, string) {
	t.Helper()
	cmd := exec.Command(bin, append(append([]string{"bisect"}, args...), "--json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bisect %q: %v\n%s", args, err, stderr.String())
	}
	var rep bisect.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	return rep, stderr.String()
}

// bisectState is the state bisect saved in its out directory.
func bisectState(t *testing.T, out string) bisect.State {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, bisect.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st bisect.State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestBisectThroughProcesses: real server processes from the command
// template — health wait, sessions, stop; an arm whose flags make the
// server exit at start and one whose server is killed mid-arm are marked
// failed with the log tail, and the others finish.
func TestBisectThroughProcesses(t *testing.T) {
	t.Parallel() // its own processes, ports and temp dirs: it mostly waits on them
	bin := kvcanaryBinary(t)
	dir := t.TempDir()
	plan := writeProcessPlan(t, dir, `
[[arm]]
name = "unknown-flag"
flags = ["--no-such-flag"]
[[arm]]
name = "killed"
flags = ["--max-running-requests=7"]
[[arm]]
name = "fp8"
flags = ["--index-k-dtype", "fp8"]
`)
	out := filepath.Join(dir, "out")
	rep, stderr := bisectJSON(t, bin, plan, "--out", out)
	byName := map[string]bisect.ArmReport{}
	for _, a := range rep.Arms {
		byName[a.Name] = a
	}
	if a := byName["unknown-flag"]; a.Decision != bisect.Failed || !strings.Contains(a.Error, "exited before it was healthy") || !strings.Contains(a.Error, "no-such-flag") {
		t.Errorf("unknown-flag: %q, error %q (want the exit and the log tail naming the flag)", a.Decision, a.Error)
	}
	if a := byName["killed"]; a.Decision != bisect.Failed || !strings.Contains(a.Error, "exited during the sessions") {
		t.Errorf("killed: %q, error %q", a.Decision, a.Error)
	}
	if a := byName["fp8"]; a.Decision == bisect.Failed || a.Decision == bisect.Undecided || a.Sessions < 8 {
		t.Errorf("fp8: %q after %d sessions (%s)\n%s", a.Decision, a.Sessions, a.Error, stderr)
	}
	if b := byName["baseline"]; b.Sessions < 8 || len(b.Bundles) == 0 {
		t.Errorf("baseline: %d sessions, bundles %v", b.Sessions, b.Bundles)
	}
	for _, f := range []string{"baseline-0.log", "baseline-0.kvtrace", "fp8-0.kvtrace", bisect.StateFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("evidence: %v", err)
		}
	}
	// No server, and nothing of its process group, outlives the bisect.
	// This test's servers only (their --run names its wrapper): other
	// tests, and other work on the machine, may run sim serve meanwhile.
	if o, _ := exec.Command("pgrep", "-f", "--run bisect-test:"+filepath.Join(dir, "serve.sh")).Output(); len(bytes.TrimSpace(o)) > 0 {
		t.Errorf("servers still running: %s", o)
	}
	if o, _ := exec.Command("pgrep", "-x", "-f", "sleep 313").Output(); len(bytes.TrimSpace(o)) > 0 {
		t.Errorf("the killed server's child still runs: %s", o)
	}
}

// TestBisectResumeAfterSIGINT: SIGINT mid-bisect exits 130 with the state
// saved; --resume finishes the plan without re-running a counted session.
func TestBisectResumeAfterSIGINT(t *testing.T) {
	t.Parallel() // its own processes, ports and temp dirs: it mostly waits on them
	bin := kvcanaryBinary(t)
	dir := t.TempDir()
	plan := writeProcessPlan(t, dir, `
[[arm]]
name = "fp8"
flags = ["--index-k-dtype", "fp8"]
[[arm]]
name = "no-graph"
flags = ["--disable-cuda-graph"]
`)
	out := filepath.Join(dir, "out")
	cmd := exec.Command(bin, "bisect", plan, "--out", out)
	pr, pw, _ := os.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var log strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "bisect: fp8: started") {
			time.Sleep(500 * time.Millisecond)
			_ = cmd.Process.Signal(syscall.SIGINT)
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("after SIGINT: %v, want exit 130\n%s", err, log.String())
	}
	st0 := bisectState(t, out)
	if len(st0.Arms[0].Sessions) < 8 {
		t.Fatalf("baseline sessions saved: %d", len(st0.Arms[0].Sessions))
	}
	rep, _ := bisectJSON(t, bin, plan, "--out", out, "--resume")
	if !rep.Complete {
		t.Fatalf("not complete after resume: %+v", rep.Verdict)
	}
	st1 := bisectState(t, out)
	for i, a := range st1.Arms {
		seen := map[string]bool{}
		for j, s := range a.Sessions {
			if seen[s.ID] {
				t.Fatalf("%s: session %s counted twice", a.Name, s.ID)
			}
			seen[s.ID] = true
			if j < len(st0.Arms[i].Sessions) && st0.Arms[i].Sessions[j] != s {
				t.Fatalf("%s: counted session %d changed on resume: %v → %v", a.Name, j, st0.Arms[i].Sessions[j], s)
			}
		}
	}
	// Without --resume an existing bisect is not overwritten.
	again := exec.Command(bin, "bisect", plan, "--out", out)
	if err := again.Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("bisect into a used --out: %v, want exit 2", err)
	}
}

// On a terminal bisect keeps a status line under its log: the arm, its
// sessions counted and corrupted. One look per arm at 4 one-round
// sessions (budget = batch = baseline_start = concurrency): the status
// line needs no decision, and the twin waves run in process (16 sessions
// of 2 rounds per arm took minutes under -race).
func TestBisectStatusLineOnATerminal(t *testing.T) {
	plan := filepath.Join(t.TempDir(), "p.toml")
	if err := os.WriteFile(plan, []byte("[[arm]]\nname = \"fp8\"\nflags = [\"--index-k-dtype\", \"fp8\"]\n[workload]\nconcurrency = 4\nrounds = 1\n[stats]\nbudget = 4\nbatch = 4\nbaseline_start = 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newTestCLI()
	c.IO.SetTTY(false, true)
	if err := c.exec(NewCmdBisect(c.F, nil), plan, "--out", filepath.Join(t.TempDir(), "out")); err != nil {
		t.Fatalf("bisect: %v\n%s", err, c.ErrOut)
	}
	for _, want := range []string{"\r\x1b[Kbisect: baseline: ", "sessions counted, ", "bisect: fp8 look at 4: "} {
		if !strings.Contains(c.ErrOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%q", want, c.ErrOut)
		}
	}
}

// Without --out a bisect writes into a new directory per run in the state
// directory, nothing beside its plan: the README's command runs twice
// (issue 23: it wrote examples/seeds.bisect/ into the checkout and exited
// 2 the second time), and --resume without --out finds the newest bisect of
// the same plan, not one of another plan with the same name.
func TestBisectDefaultOutIsANewStateDirPerRun(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	planDir := t.TempDir()
	plan := filepath.Join(planDir, "p.toml")
	body := "[[arm]]\nname = \"fp8\"\nflags = [\"--index-k-dtype\", \"fp8\"]\n[workload]\nconcurrency = 8\nrounds = 2\n[stats]\nbudget = 8\nbatch = 8\nbaseline_start = 8\n"
	if err := os.WriteFile(plan, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	// Another plan of the same name, elsewhere: its bisect is no candidate
	// for p.toml's --resume.
	other := filepath.Join(t.TempDir(), "p.toml")
	if err := os.WriteFile(other, []byte("# another plan\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	// One clock for every run: the runs start "within a second", so the
	// directories need the -N suffix to stay apart.
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	run := func(args ...string) (bisect.Report, string) {
		t.Helper()
		c := newTestCLI()
		c.F.Now = func() time.Time { return now }
		if err := c.exec(NewCmdBisect(c.F, nil), append(args, "--json")...); err != nil {
			t.Fatalf("bisect %q: %v\n%s", args, err, c.ErrOut)
		}
		var rep bisect.Report
		if err := json.Unmarshal(c.Out.Bytes(), &rep); err != nil {
			t.Fatalf("%v\n%s", err, c.Out)
		}
		return rep, c.ErrOut.String()
	}
	root := filepath.Join(state, "kvcanary", "bisect")
	first, stderr1 := run(plan)
	second, _ := run(plan)
	if want := filepath.Join(root, "p-20260102-030405"); first.Out != want {
		t.Errorf("first bisect wrote to %s, want %s", first.Out, want)
	}
	if want := filepath.Join(root, "p-20260102-030405-2"); second.Out != want {
		t.Errorf("second bisect wrote to %s, want %s", second.Out, want)
	}
	if !strings.Contains(stderr1, "bisect: writing to "+first.Out+"\n") {
		t.Errorf("stderr does not say where the bisect writes:\n%s", stderr1)
	}
	for _, rep := range []bisect.Report{first, second} {
		if _, err := os.Stat(filepath.Join(rep.Out, bisect.StateFile)); err != nil {
			t.Errorf("no state in %s: %v", rep.Out, err)
		}
	}
	if ents, err := os.ReadDir(planDir); err != nil || len(ents) != 1 {
		t.Errorf("the plan's directory holds %v (%v), want only the plan", ents, err)
	}
	otherRep, _ := run(other)
	if want := filepath.Join(root, "p-20260102-030405-3"); otherRep.Out != want {
		t.Errorf("the other plan's bisect wrote to %s, want %s", otherRep.Out, want)
	}
	// --resume continues the newest bisect of this plan: the second run's
	// directory, skipping the newer one of the other plan.
	resumed, stderr := run(plan, "--resume")
	if resumed.Out != second.Out || !strings.Contains(stderr, "resuming "+plan+" from "+filepath.Join(second.Out, bisect.StateFile)) {
		t.Errorf("--resume continued %s, want %s\n%s", resumed.Out, second.Out, stderr)
	}
	// A plan never run before has nothing to resume: the error names where
	// kvcanary looked and what to do.
	fresh := filepath.Join(t.TempDir(), "q.toml")
	if err := os.WriteFile(fresh, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newTestCLI()
	err := c.exec(NewCmdBisect(c.F, nil), fresh, "--resume")
	if err == nil || !strings.Contains(err.Error(), "no bisect of "+fresh+" in "+root) || !strings.Contains(err.Error(), "--out") {
		t.Errorf("--resume of a plan never run: %v", err)
	}
}
