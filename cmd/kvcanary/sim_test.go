package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
)

func runSim(t *testing.T, tty bool, args ...string) (string, string, error) {
	t.Helper()
	c := newTestCLI()
	c.IO.SetTTY(tty, tty)
	err := c.exec(NewCmdSim(c.F), args...)
	return c.Out.String(), c.ErrOut.String(), err
}

func TestSimRunJSONSchema(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "sched.log")
	out, _, err := runSim(t, false, "run", "--sessions", "4", "--rounds", "1", "--seed", "3", "--json",
		"--log-file", logFile, "--inject", "stale-seqlen", "--record", filepath.Join(dir, "run.kvtrace"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode --json: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatal("--json printed more than one object")
	}
	for _, k := range []string{"config", "sessions", "rounds", "outcomes", "corrupted_sessions", "corruption_rate", "wilson95", "sched", "steps", "wall_seconds"} {
		if _, ok := m[k]; !ok {
			t.Errorf("--json lacks %q", k)
		}
	}
	cfg := m["config"].(map[string]any)
	for _, k := range []string{"index_k_dtype", "disable_cuda_graph", "cuda_graph_max_bs", "multi_stream_overlap", "disaggregation", "max_running_requests", "pool_tokens", "inject", "seed"} {
		if _, ok := cfg[k]; !ok {
			t.Errorf("config lacks %q", k)
		}
	}
	if inj := cfg["inject"].([]any); len(inj) != 1 || inj[0] != "stale-seqlen" {
		t.Errorf("config.inject = %v", inj)
	}
	outcomes := m["outcomes"].(map[string]any)
	total := 0.0
	for _, k := range []string{"done", "maxrounds", "leak", "no_tool", "error", "timeout"} {
		v, ok := outcomes[k].(float64)
		if !ok {
			t.Errorf("outcomes lacks %q", k)
		}
		total += v
	}
	if total != 4 {
		t.Errorf("outcomes sum to %v, want 4 sessions", total)
	}
	sched := m["sched"].(map[string]any)
	for _, k := range []string{"peak_running_req", "retractions", "peak_token_usage"} {
		if _, ok := sched[k]; !ok {
			t.Errorf("sched lacks %q", k)
		}
	}
	if w := m["wilson95"].([]any); len(w) != 2 {
		t.Errorf("wilson95 = %v", w)
	}
	if st, err := os.Stat(filepath.Join(dir, "run.kvtrace")); err != nil || st.Size() == 0 {
		t.Errorf("bundle not written: %v", err)
	}
	if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), "Decode batch, #running-req: ") {
		t.Errorf("log file lacks Decode batch lines:\n%s", b)
	}
}

func TestSimRunText(t *testing.T) {
	out, errOut, err := runSim(t, false, "run", "--sessions", "3", "--rounds", "1", "--no-graphdiff", "--no-canary")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "CORRUPTION sessions: ") || !strings.Contains(out, "intact[done/maxrounds]=") {
		t.Errorf("headline missing:\n%s", out)
	}
	if errOut != "" {
		t.Errorf("non-TTY run wrote progress to stderr: %q", errOut)
	}
}

func TestSimRunBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--index-k-dtype", "fp16"},
		{"run", "--inject", "nope"},
		{"run", "--disaggregation", "x"},
		{"run", "--sessions", "0"},
		{"run", "--canary-policy", "sweep:0"},
	} {
		_, _, err := runSim(t, false, args...)
		if cmdutil.ExitCode(err) != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d (%v), want usage error", args, cmdutil.ExitCode(err), err)
		}
		if err != nil && !strings.Contains(err.Error(), args[1]) {
			t.Errorf("%v: error %q does not name %s", args, err, args[1])
		}
	}
}

// TestSimRunUnwritableOutputs: a --record or --log-file that cannot be
// created is an input error saying what it could not create, once.
func TestSimRunUnwritableOutputs(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	for _, tc := range []struct{ flag, file, want, once string }{
		{"--record", "run.kvtrace", "create bundle: open ", "create bundle"},
		{"--log-file", "sched.log", "open log file: open ", "log file"},
	} {
		_, _, err := runSim(t, false, "run", "--sessions", "1", "--rounds", "1", tc.flag, filepath.Join(missing, tc.file))
		if cmdutil.ExitCode(err) != cmdutil.ExitInput {
			t.Errorf("%s: exit %d (%v), want input error", tc.flag, cmdutil.ExitCode(err), err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Count(msg, tc.once) != 1 || !strings.Contains(msg, tc.file) {
			t.Errorf("%s: error %q, want one %q naming %s", tc.flag, msg, tc.want, tc.file)
		}
	}
}

func TestSimRunProgressOnTTY(t *testing.T) {
	_, errOut, err := runSim(t, true, "run", "--sessions", "2", "--rounds", "1", "--no-graphdiff", "--no-canary", "--no-checksum")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "sessions finished") {
		t.Errorf("TTY run showed no progress: %q", errOut)
	}
}

// TestSimRunSpecMove: end to end through the CLI. The spec-move fault's
// bundle makes canary report name live-page overwrites between replays
// (exit 1) while its replay headline stays at zero, and sim run's own
// sections show the room checksums clean and graph ≡ eager.
func TestSimRunSpecMove(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "spec.kvtrace")
	// Two runs in process: under -race 12 sessions and graphdiff on every
	// 8th replay instead of every other (minutes of arithmetic there; the
	// fault must still show between replays, and graphdiff still sample and
	// agree).
	size := []string{"--sessions", "16", "--rounds", "2", "--seed", "1"}
	if raceEnabled {
		size = []string{"--sessions", "12", "--rounds", "2", "--seed", "1", "--graphdiff-every", "8"}
	}
	out, _, err := runSim(t, false, append([]string{"run", "--json", "--inject", "spec-move", "--multi-stream-overlap=false", "--record", bundle}, size...)...)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Config struct {
			Inject []string `json:"inject"`
		} `json:"config"`
		Sched struct {
			SpecMoves      int64 `json:"spec_moves"`
			SpecMoveErrors int64 `json:"spec_move_errors"`
		} `json:"sched"`
		Canary struct {
			LivePageOverwrites uint64 `json:"live_page_overwrites"`
			BetweenChecks      uint64 `json:"between_checks"`
			Between            struct {
				LivePageOverwrites uint64 `json:"live_page_overwrites"`
			} `json:"between"`
		} `json:"canary"`
		Checksum struct {
			Matched    int `json:"matched"`
			Mismatched int `json:"mismatched"`
		} `json:"checksum"`
		GraphDiff struct {
			Samples   int `json:"samples"`
			Divergent int `json:"divergent"`
		} `json:"graphdiff"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if m.Sched.SpecMoves == 0 || m.Canary.BetweenChecks == 0 || m.Canary.Between.LivePageOverwrites == 0 || m.Canary.LivePageOverwrites != 0 {
		t.Fatalf("spec-move run: %+v", m)
	}
	if m.Checksum.Matched == 0 || m.Checksum.Mismatched != 0 || m.GraphDiff.Samples == 0 || m.GraphDiff.Divergent != 0 {
		t.Fatalf("spec-move run: something besides the canary fired: %+v", m)
	}
	rep, _, err := runCanaryReport(t, bundle, false, false)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("canary report exit %d (%v), want 1\n%s", cmdutil.ExitCode(err), err, rep)
	}
	text, _, err := runSim(t, false, append([]string{"run", "--inject", "spec-move", "--multi-stream-overlap=false"}, size...)...)
	if err != nil {
		t.Fatal(err)
	}
	// sim run prints the canary's headlines as `canary report` does.
	if line := fmt.Sprintf("between replays: LIVE-PAGE-OVERWRITE hits: %d in ", m.Canary.Between.LivePageOverwrites); !strings.Contains(text, line) || !strings.Contains(text, "speculative moves: ") {
		t.Fatalf("sim run text lacks the between-replay verdicts (%s):\n%s", line, text)
	}
	want := fmt.Sprintf("between replays: LIVE-PAGE-OVERWRITE hits: %d in ", m.Canary.Between.LivePageOverwrites)
	if !strings.HasPrefix(rep, "LIVE-PAGE-OVERWRITE hits: 0 in ") || !strings.Contains(rep, want) {
		t.Fatalf("canary report:\n%s", rep)
	}
}

// TestSimInjectCompletion: --inject completes to the fault list.
func TestSimInjectCompletion(t *testing.T) {
	out, _, err := runSim(t, false, "__complete", "run", "--inject", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"transfer-race", "stale-outloc", "stale-seqlen", "spec-move"} {
		if !strings.Contains(out, f+"\n") {
			t.Fatalf("completion lacks %s:\n%s", f, out)
		}
	}
}

// TestSimRunJSONSections pins the analyzers' sections of `sim run --json`
// byte for byte, as printed (indentation included), on a seeded twin run
// with something for every analyzer to count. The golden file was written
// when the sections were a map of analyzer name to Summary() any; the typed
// summaries must encode exactly as that map did.
func TestSimRunJSONSections(t *testing.T) {
	out, _, err := runSim(t, false, "run", "--sessions", "4", "--rounds", "1", "--seed", "3", "--inject", "transfer-race", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, k := range []string{"canary", "checksum", "graphdiff"} {
		start := strings.Index(out, "\n  \""+k+"\": {")
		if start < 0 {
			t.Fatalf("--json lacks the %s section:\n%s", k, out)
		}
		end := strings.Index(out[start:], "\n  }")
		b.WriteString(out[start+1:start+end+4] + "\n")
	}
	assertGolden(t, "sim-run-sections", b.String(), nil)
}

func TestSimServeFlags(t *testing.T) {
	got := mustParse(t, NewCmdSimServe, "--multi-stream-overlap=false", "--seed", "7", "--addr", "localhost:0")
	cfg, err := got.Engine.config(got.Seed)
	if err != nil || cfg.MultiStreamOverlap || cfg.Seed != 7 || got.Rounds != 4 || got.Model == "" || got.StepTime != server.EngineStepTime {
		t.Fatalf("options %+v cfg %+v err %v", got, cfg, err)
	}
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--addr", "0.0.0.0:30000"}, false},
		{[]string{"--addr", "10.1.2.3:30000"}, false},
		{[]string{"--addr", "nonsense"}, false},
		{[]string{"--addr", "0.0.0.0:30000", "--allow-remote"}, true},
		{[]string{"--addr", "[::1]:0"}, true},
		{[]string{"--rounds", "0"}, false},
		{[]string{"--step-time", "-1ms"}, false},
		{[]string{"--step-time", "0"}, true},
	} {
		_, err := parseCmd(NewCmdSimServe, tc.args...)
		if tc.ok != (err == nil) || (!tc.ok && cmdutil.ExitCode(err) != cmdutil.ExitUsage) {
			t.Errorf("%v: err %v", tc.args, err)
		}
	}
	// sim serve hangs under the sim parent.
	root := NewCmdRoot(newTestCLI().F)
	if c, _, err := root.Find([]string{"sim", "serve"}); err != nil || c.Name() != "serve" {
		t.Fatalf("sim serve not registered: %v", err)
	}
}

// TestSimServeRun serves, answers a harness, and on cancellation reports the
// ground truth and closes a bundle holding one session event per session.
func TestSimServeRun(t *testing.T) {
	ios, _, out, _ := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &cmdutil.Factory{IO: ios, Ctx: ctx, Now: time.Now}
	bundle := filepath.Join(t.TempDir(), "serve.kvtrace")
	addr, done := startSimServe(t, f, false, "--addr", "127.0.0.1:0", "--record", bundle, "--json", "--no-canary", "--no-graphdiff", "--no-checksum", "--step-time", "1ms")
	resp, err := http.Get("http://" + addr + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	res, err := repro.RunHarness(context.Background(), repro.HarnessOptions{URL: "http://" + addr, Sessions: 3, Rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var s serveSummary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if s.Requests != res.Requests || s.Sessions != 3 || s.Steps == 0 || s.GraphReplays+s.EagerSteps == 0 || s.GraphReplays+s.EagerSteps > s.Steps ||
		s.StepTime != "1ms" || s.StepOverruns > s.Steps {
		t.Fatalf("summary %+v, harness sent %d", s, res.Requests)
	}
	rs, err := runStatsFromBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Outcomes.Total() != 3 || rs.Config.Engine != "sim" || !strings.HasPrefix(rs.Config.URL, "http://127.0.0.1:") || rs.Config.StepTime != "1ms" {
		t.Fatalf("bundle %+v config %+v", rs.Outcomes, rs.Config)
	}
	// The server's session events are judged by the same classifier as the
	// harness, from the same replies: they agree.
	if rs.Outcomes != res.Outcomes {
		t.Fatalf("server bundle outcomes %+v, harness %+v", rs.Outcomes, res.Outcomes)
	}
}

// TestSimServeBusyPort: a busy address is an input error naming the address,
// and leaves neither a bundle nor a log file behind.
func TestSimServeBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	bundle, logFile := filepath.Join(dir, "serve.kvtrace"), filepath.Join(dir, "serve.log")
	_, _, err = runCmd(NewCmdSimServe, "--addr", busy.Addr().String(), "--record", bundle, "--log-file", logFile)
	if err == nil || cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), busy.Addr().String()) {
		t.Fatalf("busy port: err %v (exit %d), want an input error naming %s", err, cmdutil.ExitCode(err), busy.Addr())
	}
	for _, p := range []string{bundle, logFile} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind (stat: %v)", p, err)
		}
	}
}

// TestSimServeDrainsOnStop: Ctrl-C while a request is in flight still
// answers it (the engine keeps stepping until the HTTP server has shut down).
func TestSimServeDrainsOnStop(t *testing.T) {
	ios, _, _, _ := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &cmdutil.Factory{IO: ios, Ctx: ctx, Now: time.Now}
	addr, done := startSimServe(t, f, true, "--addr", "127.0.0.1:0", "--no-canary", "--no-graphdiff", "--no-checksum")
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"Task 1: tool rounds: 1"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`
	// A hang guard, only a failure waits this long: one answer took over
	// 20 s under -race on a loaded 2-core machine.
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	// The role delta is sent once the request is submitted to the engine.
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event %q: %v", line, err)
	}
	cancel()
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("in-flight stream after stop: %v (read %q)", err, rest)
	}
	if !strings.Contains(string(rest), `"finish_reason":`) || !strings.HasSuffix(strings.TrimSpace(string(rest)), "data: [DONE]") {
		t.Fatalf("in-flight stream not finished after stop:\n%s", rest)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// startSimServe runs `sim serve args…` in the background until it is ready
// and returns its address and the channel its exit arrives on. discardOut
// drops stdout (the tests that read the summary keep it).
func startSimServe(t *testing.T, f *cmdutil.Factory, discardOut bool, args ...string) (string, chan error) {
	t.Helper()
	ready := make(chan string, 1)
	cmd := NewCmdSimServe(f, func(o *SimServeOptions) error {
		o.Ready = func(addr string) { ready <- addr }
		return simServeRun(o)
	})
	cmd.SetArgs(args)
	cmd.SetErr(io.Discard)
	if discardOut {
		cmd.SetOut(io.Discard)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	select {
	case addr := <-ready:
		return addr, done
	case err := <-done:
		t.Fatalf("serve exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("server never became ready")
	}
	return "", nil
}
